"""kiln.contrib.django on a real Django site, on SQLite, PostgreSQL and MariaDB
(Django's MySQL backend on PyMySQL as MySQLdb): enqueue inside
``transaction.atomic()`` commits and rolls back with the block, on Django's connection;
the settings map to kiln URLs; the commands run; the dashboard obeys Django's auth."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pytest

from kiln._errors import ConfigError
from tests.support.frameworks import job_count

if TYPE_CHECKING:
    from kiln.contrib.django import App as DjangoApp


def make_app(alias: str) -> tuple[DjangoApp, str]:
    from kiln.contrib.django import App

    kind = f"email.{uuid.uuid4().hex[:8]}"  # this test's own kind: counts start at 0
    app = App(database=alias)
    app.register(kind, lambda job: None)
    return app, kind


@pytest.mark.parametrize("commit", [True, False])
def test_enqueue_in_atomic_joins_the_block(alias: str, site: dict[str, str],
                                           commit: bool) -> None:
    from django.contrib.auth.models import User
    from django.db import transaction

    app, kind = make_app(alias)
    name = f"u{uuid.uuid4().hex[:10]}"
    try:
        with transaction.atomic(using=alias):
            User.objects.using(alias).create(username=name)
            app.enqueue(kind, {"user": name})
            app.enqueue_many([(kind, {"n": 2})])
            app.enqueue_chain([(kind, {"step": 1}), (kind, {"step": 2})])
            app.enqueue_fan_in([(kind, {"part": 1})], (kind, {"final": True}))
            assert job_count(site[alias], kind) == 0  # not before the block commits
            if not commit:
                raise RuntimeError("the view fails")
    except RuntimeError:
        pass
    finally:
        app.close()
    assert job_count(site[alias], kind) == (6 if commit else 0)
    assert User.objects.using(alias).filter(username=name).exists() is commit


@pytest.mark.parametrize("commit", [True, False])
def test_explicit_django_connection(alias: str, site: dict[str, str], commit: bool) -> None:
    """``conn=connections[alias]`` works on the plain kiln.App too."""
    from django.db import connections, transaction

    import kiln

    app = kiln.App(site[alias])
    kind = f"report.{uuid.uuid4().hex[:8]}"
    app.register(kind, lambda job: None)
    try:
        with transaction.atomic(using=alias):
            app.enqueue(kind, {}, conn=connections[alias])
            transaction.set_rollback(not commit, using=alias)
    finally:
        app.close()
    assert job_count(site[alias], kind) == (1 if commit else 0)


def test_outside_atomic_the_job_commits_at_once(alias: str, site: dict[str, str]) -> None:
    app, kind = make_app(alias)
    try:
        app.enqueue(kind, {})  # autocommit, as Django's own writes outside atomic()
    finally:
        app.close()
    assert job_count(site[alias], kind) == 1


def test_settings_map_to_kiln_urls(site: dict[str, str]) -> None:
    from kiln.contrib.django._settings import url_of

    assert site["default"].startswith("sqlite:///") and site["default"].endswith("db.sqlite3")
    if "pg" in site:
        assert site["pg"].startswith("postgresql://postgres@127.0.0.1:5432/test?options=")
    if "my" in site:
        assert site["my"].startswith("mysql://root@127.0.0.1:3306/kiln_t_")
        from django.db import connections

        assert connections["my"].Database.__name__ == "pymysql"  # standing in for mysqlclient
    pg = {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "USER": "app",
          "PASSWORD": "p@ss:w/rd", "HOST": "db", "PORT": "5433", "OPTIONS": {}}
    assert url_of(pg) == "postgresql://app:p%40ss%3Aw%2Frd@db:5433/shop"
    my = {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "root", "HOST": "db"}
    assert url_of(my) == "mysql://root@db/shop"
    with pytest.raises(ConfigError, match="in-memory"):
        url_of({"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"})
    with pytest.raises(ConfigError, match="kiln runs on"):
        url_of({"ENGINE": "django.db.backends.oracle", "NAME": "x"})


def test_unknown_settings_are_refused(site: dict[str, str]) -> None:
    from django.test import override_settings

    from kiln.contrib.django import App

    with override_settings(KILN={"DATABSE": "pg"}), pytest.raises(ConfigError, match="DATABSE"):
        App()
    with override_settings(KILN={"DATABASE": "nope"}), pytest.raises(ConfigError, match="nope"):
        App()


def test_kiln_migrate_command(alias: str, site: dict[str, str],
                              capsys: pytest.CaptureFixture[str]) -> None:
    from django.core.management import call_command

    call_command("kiln_migrate", database=alias, status=True)
    out = capsys.readouterr().out
    assert "0 pending" in out and "applied  0001" in out
    call_command("kiln_migrate", database=alias)
    assert "up to date" in capsys.readouterr().out


def test_kiln_worker_command_needs_an_app(site: dict[str, str]) -> None:
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.test import override_settings

    # without Django tasks on kiln (with them, it runs their App: test_django_tasks)
    with override_settings(TASKS={}), pytest.raises(CommandError, match=r"name your kiln\.App"):
        call_command("kiln_worker")
    with pytest.raises(CommandError, match="kiln worker failed"):
        call_command("kiln_worker", app="tests.frameworks.no_such_module:app")


def test_dashboard_obeys_django_auth(site: dict[str, str]) -> None:
    import re

    from django.contrib.auth.models import User
    from django.test import Client

    name = f"s{uuid.uuid4().hex[:8]}"
    staff = User.objects.create_user(f"{name}-staff", password="pw", is_staff=True)
    User.objects.create_user(f"{name}-plain", password="pw")
    browser = Client(HTTP_HOST="shop.example.com")  # Django checks the Host
    assert browser.get("/ops/kiln/").status_code == 302  # anonymous: to the login page
    browser.login(username=f"{name}-plain", password="pw")
    assert browser.get("/ops/kiln/").status_code == 403  # signed in, not staff
    browser.force_login(staff)
    page = browser.get("/ops/kiln/jobs")
    assert page.status_code == 200 and 'href="/ops/kiln/jobs' in page.content.decode()
    app, kind = make_app("default")
    job_id = int(app.enqueue(kind, {}))
    app.close()
    detail = browser.get(f"/ops/kiln/jobs/{job_id}").content.decode()
    csrf = re.search(r'name="csrf" value="([0-9a-f]{64})"', detail)
    assert csrf is not None
    done = browser.post(f"/ops/kiln/jobs/{job_id}/cancel", {"csrf": csrf.group(1)},
                        HTTP_ORIGIN="http://shop.example.com")
    assert done.status_code == 303, done.content.decode()[-900:]
    audit = browser.get("/ops/kiln/audit").content.decode()
    assert f"{name}-staff" in audit


def test_a_sync_handler_closes_its_threads_django_connection(alias: str,
                                                              site: dict[str, str]) -> None:
    """A sync handler runs on a thread of kiln's: the Django connection it opened there
    is closed after it (CONN_MAX_AGE = 0), not left to the garbage collector."""
    from django.contrib.auth.models import User
    from django.db import connections

    from kiln import testing

    app, kind = make_app(alias)
    seen: list[Any] = []

    @app.job(f"{kind}.orm")
    def count_users(job: Any) -> int:
        User.objects.using(alias).count()
        seen.append(connections[alias])
        assert seen[-1].connection is not None  # open while the handler runs
        return 0

    @app.job(f"{kind}.async")
    async def not_wrapped(job: Any) -> None:
        pass

    try:
        assert app.kinds[f"{kind}.async"].handler is not_wrapped.fn
        assert app.kinds[f"{kind}.orm"].handler.__wrapped__ is count_users.fn  # type: ignore[attr-defined]
        app.enqueue(f"{kind}.orm", {})
        assert testing.drain(app, kinds=f"{kind}.orm", raise_errors=True).completed == 1
        assert testing.perform(app, f"{kind}.orm").outcome == "completed"
    finally:
        app.close()
    assert len(seen) == 2 and all(c.connection is None for c in seen)


def test_under_kiln_testing_the_app_stays_on_djangos_database(
        alias: str, site: dict[str, str]) -> None:
    """kiln's pytest plugin keeps a Django App on Django's database (where atomic()
    puts its jobs) rather than on a database of kiln's: commit and rollback show."""
    from django.db import transaction

    from kiln import testing

    app, kind = make_app(alias)
    assert app._testing_database_url() == site[alias]
    with testing.bound(app, app._testing_database_url()):
        with transaction.atomic(using=alias):
            app.enqueue(kind, {"n": 1})
        with pytest.raises(RuntimeError), transaction.atomic(using=alias):
            app.enqueue(kind, {"n": 2})
            raise RuntimeError("the view fails")
        testing.assert_enqueued(app, kind, args={"n": 1}, count=1)
        testing.refute_enqueued(app, kind, args={"n": 2})
    app.close()
