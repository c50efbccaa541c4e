"""``python -m tests.frameworks.django6_check [PG_URL [MYSQL_URL]]``, under a Python
3.12+ with Django 6 (test_django_tasks runs it): kiln's backend on Django's own
``django.tasks``, on a SQLite file and, given their kiln URLs, a PostgreSQL schema and a
MariaDB database (Django's MySQL backend on PyMySQL): enqueue joins ``atomic()``,
results, failures and context come back as Django's TaskResult."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.frameworks.django_site import mysql_database, pg_database


def configure(pg_url: str, mysql_url: str) -> list[str]:
    import django
    from django.conf import settings
    from django.core.management import call_command

    databases: dict[str, Any] = {"default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(tempfile.mkdtemp(prefix="kiln-django6-")) / "db.sqlite3")}}
    if pg_url:
        databases["pg"] = pg_database(pg_url)
    if mysql_url:
        import pymysql

        pymysql.install_as_MySQLdb()
        databases["my"] = mysql_database(mysql_url)
    settings.configure(
        SECRET_KEY="kiln-tests-not-secret", USE_TZ=True, DATABASES=databases,
        INSTALLED_APPS=["django.contrib.contenttypes", "kiln.contrib.django"],
        TASKS={alias: {"BACKEND": "kiln.contrib.django.tasks.KilnBackend",
                       "OPTIONS": {"database": alias}} for alias in databases},
    )
    django.setup()
    for alias in databases:
        call_command("kiln_migrate", database=alias, verbosity=0)
    return list(databases)


def check(alias: str) -> None:
    from django.db import transaction
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.exceptions import TaskResultDoesNotExist

    from kiln import testing
    from kiln.contrib.django.tasks import kiln_app
    from tests.frameworks import django6_tasks as tasks

    assert isinstance(task_backends[alias], BaseTaskBackend)
    add, boom, attempt = (t.using(backend=alias) for t in (tasks.add, tasks.boom, tasks.attempt))
    with transaction.atomic(using=alias):
        gone = add.enqueue(1, 1)
        transaction.set_rollback(True, using=alias)
    try:  # before the next enqueue: SQLite may give a rolled back id out again
        gone.refresh()
        raise AssertionError("a rolled back enqueue left a task")
    except TaskResultDoesNotExist:
        pass
    with transaction.atomic(using=alias):
        kept = add.enqueue(1, 2)
    failed, context = boom.enqueue(), attempt.enqueue()
    testing.drain(kiln_app(alias), kinds=[t.module_path for t in (add, boom, attempt)])
    for result in (kept, failed, context):
        result.refresh()
    assert kept.status == TaskResultStatus.SUCCESSFUL and kept.return_value == 3, kept
    assert kept.attempts == 1 and kept.finished_at is not None
    assert failed.status == TaskResultStatus.FAILED, failed
    assert failed.errors[0].exception_class is ValueError
    assert context.return_value == 1
    assert add.get_result(kept.id).return_value == 3


def main(argv: list[str]) -> None:
    import django

    from kiln.contrib.django._tasks_api import SOURCE

    aliases = configure(*[*argv, "", ""][:2])
    assert SOURCE == "django.tasks", SOURCE
    for alias in aliases:
        check(alias)
    print("ok", ".".join(map(str, django.VERSION[:3])), SOURCE, " ".join(aliases))


if __name__ == "__main__":
    main(sys.argv[1:])
