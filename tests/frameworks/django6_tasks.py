"""Tasks on Django 6's own ``django.tasks`` (imported by django6_check only, in a
Python that has Django 6)."""

from __future__ import annotations

from typing import Any

from django.tasks import TaskContext, task


@task()  # type: ignore[untyped-decorator]  # django has no stubs
def add(a: int, b: int) -> int:
    return a + b


@task()  # type: ignore[untyped-decorator]  # django has no stubs
def boom() -> None:
    raise ValueError("boom")


@task(takes_context=True)  # type: ignore[untyped-decorator]  # django has no stubs
def attempt(context: TaskContext) -> Any:
    return context.attempt
