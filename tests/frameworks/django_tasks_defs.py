"""The ``@task`` functions of the Django tasks tests (module level, as Django requires),
declared on the "default" backend; the tests pick a store with ``.using(backend=)``."""

from __future__ import annotations

import threading
from typing import Any

from django_tasks import TaskContext, task

started = threading.Event()
release = threading.Event()


class BounceError(Exception):
    """A failure of the user's own, with a dotted path outside builtins."""


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails", priority=10)
def send(to: str, *, subject: str = "hi") -> dict[str, Any]:
    return {"to": to, "subject": subject, "sent": ("ok", 1)}


@task()
def bounce(address: str) -> None:
    raise BounceError(f"550 no such mailbox: {address}")


@task()
def divide(a: int, b: int) -> float:
    return a / b


@task(takes_context=True)
def whoami(context: TaskContext, tag: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "tag": tag}


@task()
async def shout(word: str) -> str:
    return word.upper()


@task()
def wait_for_release() -> str:
    started.set()
    if not release.wait(30):
        raise TimeoutError("the test never released this task")
    return "released"


@task(takes_context=True)
def flaky(context: TaskContext, fail_times: int) -> int:
    if context.attempt <= fail_times:
        raise ConnectionError(f"attempt {context.attempt}: the mail server hung up")
    return context.attempt
