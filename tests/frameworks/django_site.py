"""A Django site configured in this test process: auth, sessions, kiln.contrib.django,
on a SQLite file ("default"), a fresh PostgreSQL schema ("pg") and a fresh MariaDB
database ("my") at once. Django's MySQL backend runs on PyMySQL here, installed as
MySQLdb the way docs/integrations.md tells users to (mysqlclient needs C headers).

Django's settings are the process's: they are configured once, the first time a test
asks, and each database is migrated (Django's and kiln's tables) then.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

URLS = "tests.frameworks.django_urls"
_state: dict[str, Any] = {}


def pg_database(url: str) -> dict[str, Any]:
    p = urlsplit(url)
    return {"ENGINE": "django.db.backends.postgresql", "NAME": p.path.lstrip("/"),
            "USER": p.username or "", "PASSWORD": p.password or "", "HOST": p.hostname,
            "PORT": p.port or 5432, "OPTIONS": dict(parse_qsl(p.query))}


def mysql_database(url: str) -> dict[str, Any]:
    p = urlsplit(url)
    return {"ENGINE": "django.db.backends.mysql", "NAME": p.path.lstrip("/"),
            "USER": p.username or "", "PASSWORD": p.password or "", "HOST": p.hostname,
            "PORT": p.port or 3306}


def tasks_settings(databases: dict[str, Any]) -> dict[str, Any]:
    """A kiln tasks backend per database, named as its alias, and one that retries."""
    backend = "kiln.contrib.django.tasks.KilnBackend"
    modules = ["tests.frameworks.django_tasks_defs"]
    tasks = {alias: {"BACKEND": backend, "QUEUES": ["default", "emails"],
                     "OPTIONS": {"database": alias, "modules": modules}}
             for alias in databases}
    for alias in databases:  # "pg-retry": "pg" with three attempts a task
        tasks[f"{alias}-retry"] = {"BACKEND": backend, "OPTIONS": {
            "database": alias, "max_attempts": 3}}
    return tasks


def configure(pg_url: str | None, mysql_url: str | None = None) -> dict[str, Any]:
    """Configure Django once; returns {alias: kiln URL} of the databases it has."""
    if _state:
        return dict(_state["urls"])
    import django
    from django.conf import settings
    from django.core.management import call_command

    folder = Path(tempfile.mkdtemp(prefix="kiln-django-"))
    databases: dict[str, Any] = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(folder / "db.sqlite3")}
    }
    if pg_url is not None:
        databases["pg"] = pg_database(pg_url)
    if mysql_url is not None:
        import pymysql

        pymysql.install_as_MySQLdb()  # as a user's settings.py does without mysqlclient
        databases["my"] = mysql_database(mysql_url)
    settings.configure(
        DEBUG=False, SECRET_KEY="kiln-tests-not-secret", ALLOWED_HOSTS=["shop.example.com"],
        DATABASES=databases, ROOT_URLCONF=URLS, USE_TZ=True,
        INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes",
                        "django.contrib.sessions", "kiln.contrib.django"],
        MIDDLEWARE=["django.contrib.sessions.middleware.SessionMiddleware",
                    "django.middleware.csrf.CsrfViewMiddleware",
                    "django.contrib.auth.middleware.AuthenticationMiddleware"],
        KILN={"DATABASE": "default"}, LOGIN_URL="/login/", TASKS=tasks_settings(databases),
        PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"],  # fast
    )
    django.setup()
    from kiln.contrib.django import database_url

    urls = {}
    for alias in databases:
        call_command("migrate", database=alias, verbosity=0)
        call_command("kiln_migrate", database=alias, verbosity=0)
        urls[alias] = database_url(alias)
    _state["urls"] = urls
    return dict(urls)
