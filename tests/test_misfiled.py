"""kiln._server._misfiled: which claimed jobs a pool rekeys and hands back.

Only a job of a kind whose declaration in use is this server's (never a newer deploy's,
whose keys this older server would undo, job by job, against it), whose declaration
gives it another key than the one it was claimed under. The deploy case that runs it
end to end is tests/deploys/cases.py, "concurrency key changed".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import kiln
from kiln._model._kinds import make_kind
from kiln._server._misfiled import misfiled_key
from tests.support.parts import context, row

PER_TENANT = kiln.Concurrency(max=2, key="args.tenant")


def ctx_with(concurrency: kiln.Concurrency | None, in_use: bool) -> Any:
    ctx = context(None)  # type: ignore[arg-type]  # the check reads no store
    ctx.kinds = {"k": make_kind("k", lambda job: None, queue="q", concurrency=concurrency)}
    if in_use:
        ctx.in_use.add("k")
    return ctx


def claimed(args: Any, conc_key: str | None) -> Any:
    return dataclasses.replace(row(1), args=args, conc_key=conc_key)


def test_a_job_under_another_key_is_rekeyed_when_its_declaration_is_in_use() -> None:
    ctx = ctx_with(PER_TENANT, in_use=True)
    right = PER_TENANT.key_of("kind:k", {"tenant": 1})
    assert misfiled_key(ctx, claimed({"tenant": 1}, "kind:k")) == (right, 2)  # the old key
    assert misfiled_key(ctx, claimed({"tenant": 1}, None)) == (right, 2)  # no key at all
    assert misfiled_key(ctx, claimed({"tenant": 1}, right)) is None  # its key is right


def test_a_newer_deploys_keys_are_not_undone() -> None:
    ctx = ctx_with(PER_TENANT, in_use=False)  # the declaration in use is another server's
    assert misfiled_key(ctx, claimed({"tenant": 1}, "kind:k")) is None


def test_no_key_to_give_and_no_limit_leave_the_job_as_it_is() -> None:
    ctx = ctx_with(PER_TENANT, in_use=True)
    assert misfiled_key(ctx, claimed({"other": 1}, "kind:k")) is None  # no tenant argument
    assert misfiled_key(ctx_with(None, in_use=True), claimed({"tenant": 1}, "x")) is None
    unknown = dataclasses.replace(claimed({"tenant": 1}, "x"), kind="not-mine")
    assert misfiled_key(ctx, unknown) is None
    failing = kiln.Concurrency(max=1, key=lambda args: args["ids"][3])  # IndexError here
    assert misfiled_key(ctx_with(failing, in_use=True), claimed({"ids": []}, "x")) is None
