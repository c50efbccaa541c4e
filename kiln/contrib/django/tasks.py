"""kiln as a Django tasks backend (``django.tasks``'s API, through the ``django-tasks``
backport on Django 5.2)::

    TASKS = {"default": {
        "BACKEND": "kiln.contrib.django.tasks.KilnBackend",
        "QUEUES": ["default", "emails"],      # the queue names tasks may use
        "OPTIONS": {"max_attempts": 1,        # kiln attempts per task (1: no retry)
                    "database": "default",    # DATABASES alias (default KILN["DATABASE"])
                    "modules": []},           # task modules beyond the apps' tasks.py
    }}

A ``@task`` function is the kiln kind named by its module path (``shop.tasks.welcome``),
its arguments the job's args (``{"args": [...], "kwargs": {...}}``). ``.enqueue()``
inside ``transaction.atomic()`` joins the block, on Django's connection (kiln's Django
App does it). ``manage.py kiln_worker`` runs the tasks: it imports every installed
app's ``tasks`` module (and ``OPTIONS["modules"]``), so their kinds are known. Results,
status, errors with tracebacks, times and attempts come back as Django's
``TaskResult``. Django's priorities (higher first, -100..100) are kiln's negated
(lower first).

The tasks join ``KILN["APP"]`` when that is set (one worker runs both), else an App of
kiln's own on ``KILN["DATABASE"]``. This module owns the translation between the two
APIs; it does not touch kiln's tables or scheduling.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from inspect import iscoroutinefunction
from traceback import format_exception
from typing import Any

from django.utils.module_loading import autodiscover_modules, import_string

from kiln._errors import ConfigError
from kiln._model._job import JobRow, JobState
from kiln._server import Job
from kiln.contrib.django._app import App
from kiln.contrib.django._settings import kiln_settings
from kiln.contrib.django._tasks_api import (
    TASK_MAX_PRIORITY,
    TASK_MIN_PRIORITY,
    BaseTaskBackend,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)

__all__ = ["KilnBackend", "discover", "kiln_app"]


# Any: without Django's stubs, mypy reads a TextChoices member as its (value, label) tuple
READY: Any = TaskResultStatus.READY
RUNNING: Any = TaskResultStatus.RUNNING
SUCCESSFUL: Any = TaskResultStatus.SUCCESSFUL
FAILED: Any = TaskResultStatus.FAILED
STATUS: dict[JobState, Any] = {
    JobState.AWAITING: READY, JobState.PENDING: READY, JobState.SCHEDULED: READY,
    JobState.AVAILABLE: READY, JobState.RUNNING: RUNNING, JobState.COMPLETED: SUCCESSFUL,
    JobState.FAILED: FAILED, JobState.CANCELLED: FAILED,
}
OPTIONS = frozenset({"database", "max_attempts", "modules"})

_lock = threading.RLock()
# the process's Apps, by Django database alias (Django makes backends per thread)
_apps: dict[str, App] = {}
_tasks: dict[str, Task[Any, Any]] = {}  # kind (module path) -> the task as declared


def kiln_app(database: str | None = None) -> App:
    """The App Django tasks on ``database`` (default ``KILN["DATABASE"]``) are kinds of:
    ``KILN["APP"]`` when it is on that database, else kiln's own; made once per
    process, with every task declared so far."""
    config = kiln_settings()
    database = database or config["DATABASE"]
    with _lock:
        app = _apps.get(database)
        if app is None:
            app = _apps[database] = _load(config, database)
        for task in list(_tasks.values()):
            _declare(app, task)
        return app


def _load(config: dict[str, Any], database: str) -> App:
    if config["APP"] and database == config["DATABASE"]:
        from kiln.cli.worker import load_app

        app = load_app(str(config["APP"]))
        if not isinstance(app, App):
            raise ConfigError("KILN.APP", config["APP"], "Django tasks need a "
                              "kiln.contrib.django.App, to join transaction.atomic()")
        return app
    return App(database=database)


def discover(alias: str | None = None) -> App:
    """Import every installed app's ``tasks`` module and each Kiln backend's
    ``OPTIONS["modules"]``, so a worker knows every task's kind; the App of the
    backend ``alias`` (default: the first Kiln backend), ready."""
    autodiscover_modules("tasks")
    chosen: list[str | None] = []
    for name in task_backends.settings:
        backend = task_backends[name]
        if isinstance(backend, KilnBackend):
            if alias in (None, name) and not chosen:
                chosen.append(backend.database)
            for module in backend.options.get("modules", ()):
                importlib.import_module(module)
    return kiln_app(chosen[0] if chosen else None)


class KilnBackend(BaseTaskBackend):
    """Django's tasks on kiln: durable, transactional, retried, on any kiln store."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        unknown = sorted(set(self.options) - OPTIONS)
        if unknown:
            raise ConfigError(f"TASKS.{alias}.OPTIONS", unknown[0],
                              f"unknown option: use {', '.join(sorted(OPTIONS))}")
        self.max_attempts = self.options.get("max_attempts", 1)
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:
            raise ConfigError(f"TASKS.{alias}.OPTIONS.max_attempts", self.max_attempts,
                              "a whole number of attempts, at least 1")
        self.database: str | None = self.options.get("database")

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        with _lock:
            _tasks[task.module_path] = task  # the latest declaration (a reload replaces it)
            for app in _apps.values():
                _declare(app, task)

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        self.validate_task(task)
        app = kiln_app(self.database)
        job_id = app.enqueue(
            task.module_path, {"args": normalize_json(args), "kwargs": normalize_json(kwargs)},
            queue=task.queue_name, priority=-task.priority, run_at=task.run_after,
            max_attempts=self.max_attempts, metadata={"django_task_backend": self.alias},
        )
        result: TaskResult[Any] = TaskResult(
            task=task, id=str(int(job_id)), status=READY,
            enqueued_at=datetime.now(UTC), started_at=None, last_attempted_at=None,
            finished_at=None, args=args, kwargs=kwargs, backend=self.alias, errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        try:
            job_id = int(result_id)
        except (TypeError, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        row = kiln_app(self.database).get(job_id)
        task = _task_of(row.kind) if row is not None else None
        if row is None or task is None:
            raise TaskResultDoesNotExist(result_id)
        return result_of(row, task, self.alias)


def result_of(row: JobRow, task: Task[Any, Any], backend: str) -> TaskResult[Any]:
    """The job as Django's TaskResult: one worker id per attempt, one TaskError per
    failed attempt, the return value once completed."""
    status = STATUS[row.state]
    workers = [row.server_id or "kiln"] * row.attempt
    for error in row.errors:
        if 0 < error.attempt <= len(workers) and error.server_id:
            workers[error.attempt - 1] = error.server_id
    args = row.args if isinstance(row.args, dict) else {}
    result: TaskResult[Any] = TaskResult(
        task=replace(task, queue_name=row.queue, backend=backend, run_after=None,
                     # Django's range: a priority set in kiln may lie beyond it
                     priority=max(TASK_MIN_PRIORITY, min(TASK_MAX_PRIORITY, -row.priority))),
        id=str(row.id), status=status, enqueued_at=row.created_at,
        started_at=row.attempted_at, last_attempted_at=row.attempted_at,
        finished_at=row.finished_at if status in (SUCCESSFUL, FAILED) else None,
        args=args.get("args", []), kwargs=args.get("kwargs", {}), backend=backend,
        errors=[TaskError(exception_class_path=_class_path(e.error, e.traceback),
                          traceback=e.traceback or e.error) for e in row.errors],
        worker_ids=workers,
    )
    if status == SUCCESSFUL:
        object.__setattr__(result, "_return_value", row.result)
    return result


def _class_path(error: str, traceback: str) -> str:
    """The raised exception's dotted path: the traceback's last line names it with its
    module (``shop.errors.Bounce: ...``), builtins without one (``ValueError: ...``)."""
    name = error.partition(":")[0].strip()
    for line in reversed(traceback.splitlines()):
        head = line.partition(":")[0]
        if head == name or head.endswith(f".{name}"):
            return head if "." in head else f"builtins.{head}"
    return f"builtins.{name}" if name.isidentifier() else "builtins.Exception"


def _task_of(kind: str) -> Task[Any, Any] | None:
    task = _tasks.get(kind)
    if task is None:
        try:
            found = import_string(kind)
        except ImportError:
            return None
        task = found if isinstance(found, Task) else None
    return task


def _declare(app: App, task: Task[Any, Any]) -> None:
    if task.module_path not in app.kinds:
        app.register(task.module_path, _handler(task.module_path, task),
                     queue=task.queue_name)


def _handler(kind: str, declared: Task[Any, Any]) -> Callable[[Job], Any]:
    def call(job: Job) -> tuple[Task[Any, Any], Any, list[Any], dict[str, Any]]:
        task = _tasks.get(kind, declared)
        args = list(job.args.get("args", [])) if isinstance(job.args, dict) else []
        kwargs = dict(job.args.get("kwargs", {})) if isinstance(job.args, dict) else {}
        if task.takes_context:
            args.insert(0, TaskContext(task_result=_running(job, task)))
        backend = type(task_backends[task.backend])
        return task, backend, args, kwargs

    if iscoroutinefunction(declared.func):
        async def run_async(job: Job) -> Any:
            task, backend, args, kwargs = call(job)
            task_started.send(backend, task_result=_running(job, task))
            with _finishing(job, task, backend):
                return normalize_json(await task.func(*args, **kwargs))

        return run_async

    def run(job: Job) -> Any:
        task, backend, args, kwargs = call(job)
        task_started.send(backend, task_result=_running(job, task))
        with _finishing(job, task, backend):
            return normalize_json(task.func(*args, **kwargs))

    return run


@contextmanager
def _finishing(job: Job, task: Task[Any, Any], backend: Any) -> Iterator[None]:
    """Django's ``task_finished``, as its backends send it: once the task succeeded, or
    failed with no attempt left (a failure kiln retries is not finished)."""
    try:
        yield
    except BaseException as exc:
        if job.attempt >= job.max_attempts:
            task_finished.send(backend, task_result=_running(job, task, FAILED, exc))
        raise
    task_finished.send(backend, task_result=_running(job, task, SUCCESSFUL))


def _running(job: Job, task: Task[Any, Any], status: Any = RUNNING,
             error: BaseException | None = None) -> TaskResult[Any]:
    """The TaskResult a running task's context and Django's signals see
    (``context.attempt`` is kiln's)."""
    args = job.args if isinstance(job.args, dict) else {}
    errors = [] if error is None else [TaskError(
        exception_class_path=f"{type(error).__module__}.{type(error).__qualname__}",
        traceback="".join(format_exception(error)))]
    return TaskResult(
        task=task, id=str(job.id), status=status,
        enqueued_at=job.created_at, started_at=None, last_attempted_at=None,
        finished_at=None, args=args.get("args", []), kwargs=args.get("kwargs", {}),
        backend=task.backend, errors=errors, worker_ids=["kiln"] * job.attempt,
    )


def __getattr__(name: str) -> Any:
    """``kiln.contrib.django.tasks:app``, the App ``manage.py kiln_worker`` runs when
    ``KILN["APP"]`` is not set."""
    if name == "app":
        return discover()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
