"""docs/integrations.md: every example runs as written, on the databases its path
supports. ``test_every_example_is_run`` keeps this list and the page in step."""

from __future__ import annotations

import functools
import shlex
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import kiln
import kiln.sqlalchemy
from kiln._model._job import JobFilter
from kiln.cli import run
from kiln.stores import Store, _migrations
from tests.frameworks.asgi import served
from tests.support.docblocks import blocks
from tests.support.frameworks import ASYNC_DRIVER, SYNC_DRIVER, job_count, sa_url

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
RUN = {"session", "async-session", "alembic", "cli", "django-settings", "django-mysql",
       "django-jobs",
       "django-test", "django-commands", "django-urls", "django-tasks-settings",
       "django-tasks", "fastapi", "fastapi-test",
       "starlette"}


def examples() -> dict[str, str]:
    return {b.marker.removeprefix("example: "): b.code for b in blocks(DOC)
            if b.marker is not None and b.marker.startswith("example: ")}


def test_every_example_is_run() -> None:
    text = DOC.read_text()
    assert set(examples()) == RUN
    assert text.count("```python") + text.count("```sh") == len(RUN) + 1  # + the install


def orders_table() -> sa.Table:
    return sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("total", sa.Integer))


@pytest.fixture
def jobs(store: Store, store_url: str) -> Any:
    app = kiln.App(store_url)
    app.register("email.receipt", lambda job: None)
    yield app
    app.close()


async def test_session(jobs: kiln.App, store: Store, store_url: str, backend: str) -> None:
    engine = sa.create_engine(sa_url(store_url, SYNC_DRIVER[backend]))
    orders = orders_table()
    orders.metadata.create_all(engine)
    try:
        exec(examples()["session"], {"engine": engine, "orders": orders, "jobs": jobs})
        [job] = await store.job_list(JobFilter(kind="email.receipt"), 10, None)
        assert job.args == {"order": 42}
        with engine.connect() as c:
            assert c.execute(sa.select(orders.c.id)).scalars().all() == [42]
    finally:
        engine.dispose()


async def test_async_session(jobs: kiln.App, store: Store, store_url: str,
                             backend: str) -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    if backend not in ASYNC_DRIVER:
        pytest.skip(f"{backend}: no joinable async driver (the page says so)")
    engine = create_async_engine(sa_url(store_url, ASYNC_DRIVER[backend]))
    orders = orders_table()
    async with engine.begin() as c:
        await c.run_sync(orders.metadata.create_all)
    namespace: dict[str, Any] = {"async_engine": engine, "orders": orders, "jobs": jobs}
    exec("async def example():\n" + textwrap.indent(examples()["async-session"], "    "),
         namespace)
    try:
        await namespace["example"]()
        assert await store.job_count(JobFilter()) == 0  # the example rolls back
    finally:
        await engine.dispose()


def test_alembic(store_url: str, backend: str) -> None:
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    namespace: dict[str, Any] = {}
    exec(examples()["alembic"], namespace)
    engine = sa.create_engine(sa_url(store_url, SYNC_DRIVER[backend]))
    try:
        with engine.begin() as conn, Operations.context(MigrationContext.configure(conn)):
            namespace["upgrade"]()
        with engine.connect() as conn:
            assert kiln.sqlalchemy.schema_version(conn) == _migrations.latest(
                "kiln.stores.sqlite")
    finally:
        engine.dispose()


def test_cli(empty_store_url: str, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KILN_DATABASE_URL", empty_store_url)
    for line in examples()["cli"].strip().splitlines():
        argv = shlex.split(line)
        assert argv[0] == "kiln" and run(argv[1:]) == 0, line
    out = capsys.readouterr().out
    assert "pending  0001" in out and "kiln migrations 4.." in out


def test_django_settings() -> None:
    from kiln.contrib.django._settings import DEFAULTS

    namespace: dict[str, Any] = {}
    exec(examples()["django-settings"], namespace)
    assert "kiln.contrib.django" in namespace["INSTALLED_APPS"]
    assert set(namespace["KILN"]) == set(DEFAULTS)


def test_django_mysql(site: dict[str, str]) -> None:
    """The PyMySQL settings: MySQLdb is PyMySQL then (the test site runs its MariaDB
    alias that way), and kiln maps the DATABASES entry to its own URL."""
    import sys

    from kiln.contrib.django._settings import url_of

    namespace: dict[str, Any] = {}
    exec(examples()["django-mysql"], namespace)
    assert sys.modules["MySQLdb"] is namespace["pymysql"]
    assert url_of(namespace["DATABASES"]["default"]) == "mysql://app:...@db:3306/shop"


def test_django_jobs(alias: str, site: dict[str, str]) -> None:
    from django.contrib.auth.models import User
    from django.test import RequestFactory, override_settings

    class Customer:  # the page's model: a User stands in for it
        class objects:
            @staticmethod
            def create(email: str) -> User:
                return User.objects.db_manager(alias).create(username=email, email=email)

    namespace: dict[str, Any] = {"Customer": Customer}
    with override_settings(KILN={"DATABASE": alias}):
        exec(examples()["django-jobs"], namespace)
    request = RequestFactory().post("/signup/", {"email": f"{alias}-doc@example.com"})
    response = namespace["signup"](request)
    namespace["jobs"].close()
    assert response.status_code == 201
    assert job_count(site[alias], "email.welcome") >= 1


def test_django_test(alias: str, site: dict[str, str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's tests of the signup view, given ``kiln_jobs`` as the plugin makes it
    for a Django App (on Django's database: ``_testing_database_url``)."""
    import sys

    from django.contrib.auth.models import User
    from django.db import transaction
    from django.test import override_settings

    from kiln.testing import KilnJobs, bound

    class Customer:  # the page's model: a User stands in for it (username unique)
        class objects:
            @staticmethod
            def create(email: str) -> User:
                return User.objects.db_manager(alias).create(username=email, email=email)

    views = types.ModuleType("shop.views")
    views.__dict__["Customer"] = Customer
    with override_settings(KILN={"DATABASE": alias}):
        exec(examples()["django-jobs"], views.__dict__)
    # the view's atomic() on this alias, where the stand-in writes (Django's default is
    # the SQLite one)
    views.__dict__["transaction"] = types.SimpleNamespace(
        atomic=functools.partial(transaction.atomic, using=alias))
    monkeypatch.setitem(sys.modules, "shop", types.ModuleType("shop"))
    monkeypatch.setitem(sys.modules, "shop.views", views)
    tests: dict[str, Any] = {}
    exec(examples()["django-test"], tests)
    jobs = views.__dict__["jobs"]
    try:
        with bound(jobs, jobs._testing_database_url()):  # what the plugin does
            kiln_jobs = KilnJobs(jobs)
            for name in ("test_signup_enqueues_the_welcome_email",
                         "test_a_failed_signup_enqueues_nothing",
                         "test_the_welcome_email_is_sent"):
                tests[name](kiln_jobs)
            kiln_jobs.assert_enqueued("email.welcome", state="completed")
    finally:
        jobs.close()


def test_django_commands(site: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    """kiln_migrate runs here; kiln_worker runs for real in the user project's tests
    (tests/integration/user_project/test_shop.py), as it blocks until a signal."""
    from django.core.management import call_command, get_commands

    for line in examples()["django-commands"].strip().splitlines():
        argv = shlex.split(line)
        assert argv[:2] == ["python", "manage.py"] and argv[2] in get_commands()
        if argv[2] == "kiln_migrate":
            call_command(*argv[2:])
    assert "0 pending" in capsys.readouterr().out


def test_django_urls(site: dict[str, str]) -> None:
    from django.urls import resolve

    urlconf = types.ModuleType("doc_urls")
    exec(examples()["django-urls"], urlconf.__dict__)
    match = resolve("/admin/kiln/jobs/7", urlconf=urlconf)
    assert match.kwargs == {"path": "jobs/7"}


def test_django_tasks_settings(site: dict[str, str]) -> None:
    from kiln.contrib.django.tasks import KilnBackend

    namespace: dict[str, Any] = {}
    exec(examples()["django-tasks-settings"], namespace)
    params = namespace["TASKS"]["default"]
    backend = KilnBackend("default", params)  # every option known
    assert backend.max_attempts == 3 and backend.queues == {"default", "mail"}


def test_django_tasks(alias: str, site: dict[str, str],
                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's task and views on each store: the task commits with the view's
    block, a worker's run of it comes back through the status view."""
    import json
    import sys

    from django.contrib.auth.models import User
    from django.db import transaction
    from django.test import RequestFactory, override_settings

    from kiln import testing
    from kiln.contrib.django.tasks import kiln_app

    class Customer:  # the page's model: a User stands in for it
        class objects:
            @staticmethod
            def create(email: str) -> User:
                return User.objects.db_manager(alias).create(username=email, email=email)

    shop = types.ModuleType("shop.tasks")  # the page's module, as Django would import it
    shop.__dict__["Customer"] = Customer
    monkeypatch.setitem(sys.modules, "shop.tasks", shop)
    tasks = {"default": {"BACKEND": "kiln.contrib.django.tasks.KilnBackend",
                         "QUEUES": ["default", "mail"], "OPTIONS": {"database": alias}}}
    with override_settings(TASKS=tasks):
        exec(examples()["django-tasks"], shop.__dict__)
        shop.__dict__["transaction"] = types.SimpleNamespace(  # the alias's atomic()
            atomic=functools.partial(transaction.atomic, using=alias))
        email = f"{alias}-tasks-doc-{id(shop)}@example.com"
        response = shop.signup(RequestFactory().post("/signup/", {"email": email}))
        task_id = json.loads(response.content)["task"]
        waiting = json.loads(shop.welcome_status(None, task_id).content)
        assert waiting == {"status": "READY", "attempts": 0, "value": None}
        testing.drain(kiln_app(alias), kinds="shop.tasks.send_welcome")
        done = json.loads(shop.welcome_status(None, task_id).content)
    customer = User.objects.db_manager(alias).get(username=email)
    assert done == {"status": "SUCCESSFUL", "attempts": 1,
                    "value": f"welcome sent to {customer.pk}"}

async def test_fastapi(store: Store, store_url: str) -> None:
    namespace: dict[str, Any] = {"DATABASE_URL": store_url,
                                 "ADMIN_TOKEN": "doc-admin-token-0123456789"}
    exec(examples()["fastapi"], namespace)
    async with served(namespace["api"]) as http:
        signed = await http.post("/signup", params={"email": "ada@example.com"})
        assert signed.status_code == 201
        assert (await http.get("/admin/kiln/")).status_code == 401
        page = await http.get("/admin/kiln/jobs", headers={
            "Authorization": "Bearer doc-admin-token-0123456789"})
        assert page.status_code == 200 and "email.welcome" in page.text
    job = await store.job_get(signed.json()["job"])
    assert job is not None and job.args == {"email": "ada@example.com"}


async def test_starlette(tmp_path: Path) -> None:
    jobs = kiln.App(f"sqlite:///{tmp_path / 'kiln.db'}")
    await jobs.amigrate()
    namespace: dict[str, Any] = {"jobs": jobs}
    exec(examples()["starlette"], namespace)
    async with served(namespace["app"]) as http:
        assert (await http.get("/ops/kiln/")).status_code == 401
    jobs.close()



MYAPI = '''
from typing import Annotated

import sqlalchemy as sa
from fastapi import Depends, FastAPI
from sqlalchemy.orm import Session

import kiln
from kiln.contrib.fastapi import lifespan

engine = sa.create_engine("sqlite:///never-opened-by-the-tests.db")
orders = sa.Table("orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
jobs = kiln.App("sqlite:///never-opened-by-the-tests.db")
jobs.register("email.receipt", lambda job: None)


def get_session():
    with Session(engine) as session:
        yield session


api = FastAPI(lifespan=lifespan(jobs))


@api.post("/orders/{order}", status_code=201)
def create_order(order: int, session: Annotated[Session, Depends(get_session)]) -> None:
    orders.metadata.create_all(session.connection())
    session.execute(orders.insert().values(id=order))
    jobs.enqueue("email.receipt", {"order": order}, conn=session)
    session.commit()
'''


def test_fastapi_test(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's test, run by pytest with the plugin against a service shaped as the
    page says (its session from a ``get_session`` dependency); on SQLite, the plugin's
    default (the ``conn=session`` paths are tested on every database above)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.delenv("KILN_TEST_DATABASE_URL", raising=False)
    (pytester.path / "myapi").mkdir()
    (pytester.path / "myapi" / "__init__.py").write_text("")
    (pytester.path / "myapi" / "main.py").write_text(MYAPI)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_api.py").write_text(examples()["fastapi-test"])
    pytester.syspathinsert()
    result = pytester.runpytest_subprocess("-p", "kiln.testing.pytest_plugin",
                                           "-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()  # (a warning: starlette's TestClient on this httpx)
    assert outcomes.get("passed") == 1 and "failed" not in outcomes, result.stdout.str()
