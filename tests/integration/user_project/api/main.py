"""The reports service: FastAPI, SQLAlchemy, and kiln on the same database."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, FastAPI, Header, HTTPException
from sqlalchemy.orm import Session

import kiln
import kiln.web
from kiln.contrib.fastapi import lifespan, mount_dashboard

URL = os.environ["USER_PROJECT_DATABASE_URL"]


def make_engine(url: str) -> sa.Engine:
    return sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))


engine = make_engine(URL)
reports = sa.Table("reports", sa.MetaData(), sa.Column("name", sa.String(40)))
jobs = kiln.App(URL)


def get_session() -> Iterator[Session]:
    with Session(engine) as session:
        yield session


built: list[str] = []


@jobs.job("report.build")
async def build_report(job: kiln.Job) -> None:
    pages = job.params.get("pages", 0)
    while pages < 3:
        pages += 1
        await job.set_param("pages", pages)  # a checkpoint: a retry resumes here
    built.append(job.args["name"])


def current_user(authorization: Annotated[str | None, Header()] = None) -> str:
    if authorization is None or not authorization.startswith("Bearer user-"):
        raise HTTPException(401, "sign in")
    return authorization.removeprefix("Bearer ")


def current_admin(user: Annotated[str, Depends(current_user)]) -> str:
    if user != "user-admin":
        raise HTTPException(403, "admins only")
    return user


api = FastAPI(lifespan=lifespan(jobs))
mount_dashboard(api, "/admin/kiln", kiln.web.create_app(jobs), user=current_admin)


@api.post("/reports/{name}", status_code=201)
def create_report(name: str, user: Annotated[str, Depends(current_user)],
                  session: Annotated[Session, Depends(get_session)]) -> dict[str, int]:
    session.execute(reports.insert().values(name=name))
    job = jobs.enqueue("report.build", {"name": name, "by": user}, conn=session)
    if name == "broken":
        session.rollback()  # neither the report nor its job
        raise HTTPException(422, "broken report")
    session.commit()
    return {"job": int(job)}
