"""kiln as a Django tasks backend (kiln.contrib.django.tasks, on the django-tasks
backport): the backend contract (enqueue, get_result, status transitions, errors,
priority, run_after, queue names, context, async tasks) and enqueue inside
``transaction.atomic()``, on SQLite, PostgreSQL and MariaDB. Jobs run through kiln's
claim and completion path (kiln.testing.drain), as a worker runs them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from kiln import testing
from tests.support.waits import wait_for_sync as wait_for

pytest.importorskip("django_tasks", reason="the django-tasks backport is not installed")


@pytest.fixture
def tasks(alias: str) -> Any:
    from tests.frameworks import django_tasks_defs

    return django_tasks_defs


def drain(alias: str, *kinds: Any, **options: Any) -> testing.Drained:
    from kiln.contrib.django.tasks import kiln_app

    return testing.drain(kiln_app(alias), kinds=[t.module_path for t in kinds], **options)


def test_enqueue_runs_and_reports_success(alias: str, tasks: Any) -> None:
    from django_tasks import TaskResultStatus, task_backends

    from kiln.contrib.django.tasks import KilnBackend

    backend = task_backends[alias]
    assert isinstance(backend, KilnBackend)
    assert (backend.supports_defer, backend.supports_async_task, backend.supports_get_result,
            backend.supports_priority) == (True, True, True, True)
    result = tasks.add.using(backend=alias).enqueue(2, 3)
    assert result.status == TaskResultStatus.READY and result.backend == alias
    assert result.id.isdigit() and result.args == [2, 3] and result.kwargs == {}
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value
    stored = tasks.add.using(backend=alias).get_result(result.id)
    assert stored.status == TaskResultStatus.READY and stored.enqueued_at is not None
    assert stored.started_at is None and stored.finished_at is None and stored.attempts == 0
    assert stored.args == [2, 3] and stored.task.func is tasks.add.func
    drain(alias, tasks.add)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 5
    assert result.is_finished and result.errors == [] and result.attempts == 1
    assert result.enqueued_at is not None and result.started_at is not None
    assert result.finished_at is not None and result.last_attempted_at == result.started_at
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.enqueued_at.tzinfo is not None and len(result.worker_ids[0]) > 0


def test_kwargs_json_results_and_the_kind(alias: str, tasks: Any) -> None:
    from django_tasks import TaskResultStatus

    from kiln.contrib.django.tasks import kiln_app

    result = tasks.send.using(backend=alias).enqueue("ann@example.com", subject="welcome")
    job = kiln_app(alias).get(int(result.id))
    assert job is not None and job.kind == "tests.frameworks.django_tasks_defs.send"
    assert job.queue == "emails" and job.priority == -10  # kiln: lower runs first
    assert job.args == {"args": ["ann@example.com"], "kwargs": {"subject": "welcome"}}
    drain(alias, tasks.send)
    done = tasks.send.using(backend=alias).get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL
    assert done.return_value == {"to": "ann@example.com", "subject": "welcome",
                                 "sent": ["ok", 1]}  # a tuple comes back as JSON does
    assert done.task.queue_name == "emails" and done.task.priority == 10


@pytest.mark.parametrize(("name", "args", "exception"), [
    ("bounce", ["x@example.com"], "tests.frameworks.django_tasks_defs.BounceError"),
    ("divide", [1, 0], "builtins.ZeroDivisionError"),
])
def test_a_failure_is_failed_with_its_error(alias: str, tasks: Any, name: str,
                                            args: list[Any], exception: str) -> None:
    from django_tasks import TaskResultStatus

    task = getattr(tasks, name)
    result = task.using(backend=alias).enqueue(*args)
    drain(alias, task)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.is_finished
    assert result.attempts == 1 and result.finished_at is not None  # max_attempts 1
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    [error] = result.errors
    assert error.exception_class_path == exception
    assert error.exception_class.__name__ == exception.rpartition(".")[2]
    assert error.traceback.startswith("Traceback (most recent call last)")
    assert f"{name}" in error.traceback  # the task's own frame


def test_retries_keep_each_attempts_error(alias: str, tasks: Any) -> None:
    from django_tasks import TaskResultStatus

    result = tasks.flaky.using(backend=f"{alias}-retry").enqueue(1)
    drain(alias, tasks.flaky)
    result.refresh()
    assert result.status == TaskResultStatus.READY and result.attempts == 1
    assert [e.exception_class for e in result.errors] == [ConnectionError]
    assert "attempt 1: the mail server hung up" in result.errors[0].traceback
    drain(alias, tasks.flaky, with_scheduled=True)  # its backoff passes
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 2
    assert result.attempts == 2 and len(result.errors) == 1
    exhausted = tasks.flaky.using(backend=f"{alias}-retry").enqueue(5)
    for _ in range(3):
        drain(alias, tasks.flaky, with_scheduled=True)
    exhausted.refresh()
    assert exhausted.status == TaskResultStatus.FAILED and exhausted.attempts == 3
    assert len(exhausted.errors) == 3


def test_the_tasks_join_kiln_app(site: dict[str, str], tasks: Any,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """With KILN["APP"] on the tasks' database, the tasks are kinds of that App (one
    worker runs both); an App that cannot join atomic() is refused."""
    from django.test import override_settings

    import kiln
    import kiln.contrib.django.tasks as module
    from kiln._errors import ConfigError
    from kiln.contrib.django import App

    users_app = App(database="default")
    plain = kiln.App(site["default"])
    monkeypatch.setattr(sys.modules[__name__], "users_app", users_app, raising=False)
    monkeypatch.setattr(sys.modules[__name__], "plain", plain, raising=False)
    try:
        monkeypatch.setattr(module, "_apps", {})  # as in a fresh process
        with override_settings(KILN={"APP": f"{__name__}:users_app"}):
            assert module.kiln_app() is users_app and module.discover() is users_app
            assert tasks.add.module_path in users_app.kinds
            if "pg" in site:  # another database: an App of the tasks' own
                other = module.kiln_app("pg")
                assert other is not users_app and tasks.add.module_path in other.kinds
                other.close()
        monkeypatch.setattr(module, "_apps", {})
        with override_settings(KILN={"APP": f"{__name__}:plain"}), \
                pytest.raises(ConfigError, match=r"kiln\.contrib\.django\.App"):
            module.kiln_app()
    finally:
        users_app.close()
        plain.close()


def test_a_task_cancelled_in_kiln_reads_as_failed(alias: str, tasks: Any) -> None:
    """Django has no cancelled status: a task cancelled from the dashboard or
    ``kiln jobs cancel`` is FAILED, its error kiln's record of who cancelled it."""
    from django_tasks import TaskResultStatus

    from kiln.contrib.django.tasks import kiln_app

    result = tasks.add.using(backend=alias).enqueue(1, 2)
    app = kiln_app(alias)
    app._portal.run(app.sync_client().cancel_job(int(result.id)))
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is Exception and error.traceback == "Cancelled by api"
    assert result.finished_at is not None and result.attempts == 0


def test_djangos_signals(alias: str, tasks: Any) -> None:
    from django_tasks.signals import task_enqueued, task_finished, task_started

    from kiln.contrib.django.tasks import KilnBackend

    seen: list[tuple[str, str, str, type[Any]]] = []

    def receiver(signal: str) -> Any:
        def receive(sender: type[Any], task_result: Any, **kwargs: Any) -> None:
            seen.append((signal, task_result.id, str(task_result.status), sender))
        return receive

    receivers = {name: receiver(name) for name in ("enqueued", "started", "finished")}
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        ok = tasks.add.using(backend=alias).enqueue(1, 1)
        bad = tasks.bounce.using(backend=alias).enqueue("x@example.com")
        drain(alias, tasks.add, tasks.bounce)
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])
    mine = [(signal, status) for signal, id_, status, sender in seen
            if id_ in (ok.id, bad.id) and sender is KilnBackend]
    assert sorted(mine) == sorted([
        ("enqueued", "READY"), ("enqueued", "READY"), ("started", "RUNNING"),
        ("started", "RUNNING"), ("finished", "SUCCESSFUL"), ("finished", "FAILED")])


def test_unknown_options_are_refused(site: dict[str, str]) -> None:
    from kiln._errors import ConfigError
    from kiln.contrib.django.tasks import KilnBackend

    with pytest.raises(ConfigError, match="max_attempt"):
        KilnBackend("x", {"OPTIONS": {"max_attempt": 3}})
    with pytest.raises(ConfigError, match="at least 1"):
        KilnBackend("x", {"OPTIONS": {"max_attempts": 0}})


def test_running_then_successful(alias: str, tasks: Any) -> None:
    from django_tasks import TaskResultStatus

    tasks.started.clear()
    tasks.release.clear()
    result = tasks.wait_for_release.using(backend=alias).enqueue()
    worker = threading.Thread(target=drain, args=(alias, tasks.wait_for_release))
    worker.start()
    try:
        assert tasks.started.wait(30)
        result.refresh()
        assert result.status == TaskResultStatus.RUNNING and result.started_at is not None
        assert result.finished_at is None and result.attempts == 1
    finally:
        tasks.release.set()
        worker.join(30)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "released"


def test_priority_orders_higher_first(alias: str, tasks: Any) -> None:
    drain(alias, tasks.add)  # what earlier tests left
    low = tasks.add.using(backend=alias, priority=-5).enqueue(1, 1)
    high = tasks.add.using(backend=alias, priority=50).enqueue(2, 2)
    drain(alias, tasks.add, max_jobs=1)
    low.refresh()
    high.refresh()
    assert high.return_value == 4 and not low.is_finished
    assert high.task.priority == 50 and low.task.priority == -5
    drain(alias, tasks.add)
    low.refresh()
    assert low.return_value == 2


def test_priority_bounds_are_djangos(alias: str, tasks: Any) -> None:
    from django_tasks.exceptions import InvalidTaskError

    with pytest.raises(InvalidTaskError, match="priority"):
        tasks.add.using(backend=alias, priority=101)


def test_run_after_defers(alias: str, tasks: Any) -> None:
    from django.utils import timezone
    from django_tasks import TaskResultStatus
    from django_tasks.exceptions import InvalidTaskError

    later = timezone.now() + timedelta(hours=1)
    result = tasks.add.using(backend=alias, run_after=later).enqueue(3, 4)
    drain(alias, tasks.add)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # not due: not run
    drain(alias, tasks.add, with_scheduled=True)  # the hour passes
    result.refresh()
    assert result.return_value == 7
    with pytest.raises(InvalidTaskError, match="aware"):
        tasks.add.using(backend=alias, run_after=later.replace(tzinfo=None))


def test_queue_names_are_validated(alias: str, tasks: Any) -> None:
    from django_tasks.exceptions import InvalidTaskError

    with pytest.raises(InvalidTaskError, match="Queue 'nope' is not valid"):
        tasks.add.using(backend=alias, queue_name="nope")
    result = tasks.add.using(backend=alias, queue_name="emails").enqueue(5, 5)
    drain(alias, tasks.add)
    result.refresh()
    assert result.task.queue_name == "emails" and result.return_value == 10


def test_get_result_of_what_is_not_a_task(alias: str, tasks: Any) -> None:
    from django_tasks import task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch

    from kiln.contrib.django.tasks import kiln_app

    backend = task_backends[alias]
    for missing in ("999999999", "not-an-id"):
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(missing)
    app = kiln_app(alias)
    if "plain.kiln.job" not in app.kinds:
        app.register("plain.kiln.job", lambda job: None)
    with pytest.raises(TaskResultDoesNotExist):  # a kiln job, not a Django task
        backend.get_result(str(int(app.enqueue("plain.kiln.job", {}))))
    result = tasks.add.using(backend=alias).enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        tasks.divide.using(backend=alias).get_result(result.id)


def test_takes_context(alias: str, tasks: Any) -> None:
    result = tasks.whoami.using(backend=alias).enqueue("t")
    drain(alias, tasks.whoami)
    result.refresh()
    assert result.return_value == {"id": result.id, "attempt": 1, "tag": "t"}


def test_async_task_and_async_api(alias: str, tasks: Any) -> None:
    async def enqueue() -> Any:
        return await tasks.shout.using(backend=alias).aenqueue("hey")

    result = asyncio.run(enqueue())
    drain(alias, tasks.shout)

    async def fetch() -> Any:
        await result.arefresh()
        return await tasks.shout.using(backend=alias).aget_result(result.id)

    assert asyncio.run(fetch()).return_value == "HEY" and result.return_value == "HEY"


@pytest.mark.parametrize("commit", [True, False])
def test_enqueue_in_atomic_joins_the_block(alias: str, tasks: Any, commit: bool) -> None:
    from django.db import transaction
    from django_tasks import TaskResultStatus
    from django_tasks.exceptions import TaskResultDoesNotExist

    drain(alias, tasks.add)  # what other tests left: the drain below runs this one's only
    try:
        with transaction.atomic(using=alias):
            result = tasks.add.using(backend=alias).enqueue(20, 22)
            if not commit:
                raise RuntimeError("the view fails")
    except RuntimeError:
        pass
    ran = drain(alias, tasks.add)
    if commit:
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 42
    else:
        with pytest.raises(TaskResultDoesNotExist):  # rolled back with the block
            result.refresh()
        assert ran.completed == 0 and ran.failed == 0  # nothing ran


def test_kiln_worker_discovers_the_tasks(alias: str, tasks: Any) -> None:
    from kiln.contrib.django.management.commands.kiln_worker import Command
    from kiln.contrib.django.tasks import discover, kiln_app

    argv = Command().kiln_argv([], {"queue": ["default", "emails"]})
    assert argv == ["worker", "kiln.contrib.django.tasks:app", "--queue", "default",
                    "--queue", "emails"]
    import kiln.contrib.django.tasks as module

    assert module.app is kiln_app("default") is discover()
    assert tasks.add.module_path in discover(alias).kinds


DJANGO6_PYTHON = os.environ.get("KILN_DJANGO6_PYTHON", "")


@pytest.mark.skipif(not DJANGO6_PYTHON, reason="Django 6's own django.tasks needs Python "
                    "3.12+: set KILN_DJANGO6_PYTHON to one with Django 6, kiln's postgres "
                    "and mysql extras and PyMySQL installed")
def test_on_django_6s_own_tasks(site: dict[str, str]) -> None:
    """The same backend on Django 6's built-in ``django.tasks`` (not the backport), in
    another interpreter, on this session's databases (django6_check)."""
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [DJANGO6_PYTHON, "-m", "tests.frameworks.django6_check", site.get("pg", ""),
         site.get("my", "")],
        cwd=root, env={**os.environ, "PYTHONPATH": root}, capture_output=True, text=True,
        timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    aliases = " ".join(alias for alias in ("default", "pg", "my") if alias in site)
    assert done.stdout.strip().splitlines()[-1].endswith(f"django.tasks {aliases}")


WORKER_SETTINGS = """\
try:
    import pymysql
    pymysql.install_as_MySQLdb()
except ImportError:
    pass
SECRET_KEY = "kiln-tests-not-secret"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "kiln.contrib.django"]
DATABASES = {{"default": {database!r}}}
TASKS = {{"default": {{
    "BACKEND": "kiln.contrib.django.tasks.KilnBackend", "QUEUES": ["default", "emails"],
    "OPTIONS": {{"modules": ["tests.frameworks.django_tasks_defs"]}},
}}}}
"""


def test_manage_py_kiln_worker_runs_the_tasks(alias: str, tasks: Any,
                                              tmp_path: Path) -> None:
    """A real worker process (``django-admin kiln_worker``, as ``manage.py`` runs it) on
    the same database: no KILN["APP"], so it runs the tasks' App, on both queues."""
    from django.conf import settings
    from django_tasks import TaskResultStatus

    (tmp_path / "worker_settings.py").write_text(
        WORKER_SETTINGS.format(database=dict(settings.DATABASES[alias])))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()]),
           "DJANGO_SETTINGS_MODULE": "worker_settings"}
    sent = tasks.send.using(backend=alias).enqueue("bo@example.com")
    failed = tasks.bounce.using(backend=alias).enqueue("nobody@example.com")
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "kiln_worker", "--queue", "default",
         "--queue", "emails"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def finished() -> bool:
            sent.refresh()
            failed.refresh()
            assert worker.poll() is None, worker.communicate()[0].decode()[-2000:]
            return bool(sent.is_finished and failed.is_finished)

        wait_for(finished, 60, "the worker process to run both tasks")
    finally:
        worker.send_signal(signal.SIGTERM)
        out = worker.communicate(timeout=60)[0].decode()
    assert sent.status == TaskResultStatus.SUCCESSFUL, out[-2000:]
    assert sent.return_value == {"to": "bo@example.com", "subject": "hi", "sent": ["ok", 1]}
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path.endswith("django_tasks_defs.BounceError")
    assert worker.returncode == 0, out[-2000:]
