"""The pytest plugin as a user's suite meets it: settings, fixtures, errors, cost."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from kiln_pytest import _setting, load_target

ROOT = Path(__file__).resolve().parents[2]
# the inner runs load only the plugins they name, as a small user project would
PLUGIN = ("-p", "kiln.testing.pytest_plugin", "-p", "no:cacheprovider")
SYNC = PLUGIN

JOBS = """
    import kiln

    app = kiln.App()  # the default URL: sqlite:///kiln.db, never created by the tests

    @app.job("ping", queue="pings")
    def ping(job):
        pass

    def create_app(url):
        made = kiln.App(url)
        made.register("made", lambda job: None)
        return made

    not_an_app = 42
"""


@pytest.fixture(autouse=True)
def _named_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def project(pytester: pytest.Pytester, ini: str = "", **tests: str) -> None:
    pytester.makepyfile(proj=textwrap.dedent(JOBS))
    pytester.makeini(f"[pytest]\n{ini}\n")
    if tests:
        pytester.makepyfile(**{name: textwrap.dedent(body) for name, body in tests.items()})
    pytester.syspathinsert()


def test_the_ini_app_is_rebound_per_test_and_given_back(pytester: pytest.Pytester) -> None:
    project(pytester, "kiln_app = proj:app", test_it="""
        import proj

        urls = []

        def test_first(kiln_app, kiln_jobs, kiln_database_url, tmp_path):
            assert kiln_app is proj.app and kiln_app.url == kiln_database_url
            assert str(tmp_path) in kiln_database_url
            urls.append(kiln_app.url)
            proj.app.enqueue("ping", {"n": 1})
            kiln_jobs.assert_enqueued("ping", queue="pings", count=1)

        def test_second_sees_a_database_of_its_own(kiln_app, kiln_jobs):
            assert kiln_app.url != urls[0]
            kiln_jobs.refute_enqueued()

        def test_after_the_tests_the_app_is_its_own_again():
            assert proj.app.url == "sqlite:///kiln.db"
    """)
    pytester.runpytest(*SYNC).assert_outcomes(passed=3)
    assert not (pytester.path / "kiln.db").exists()


def test_the_command_line_wins_and_a_factory_is_called_with_the_url(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, "kiln_app = proj:app", test_it="""
        import proj

        def test_made(kiln_app, kiln_jobs, kiln_database_url):
            assert kiln_app is not proj.app and kiln_app.url == kiln_database_url
            assert list(kiln_app.kinds) == ["made"]
            kiln_app.enqueue("made")
            assert kiln_jobs.drain().completed == 1
    """)
    pytester.runpytest(*SYNC, "--kiln-app", "proj:create_app").assert_outcomes(passed=1)


def test_without_a_setting_kiln_app_is_an_empty_app(pytester: pytest.Pytester) -> None:
    project(pytester, test_it="""
        def test_empty(kiln_app, kiln_jobs):
            assert kiln_app.kinds == {}
            @kiln_app.job("x")
            def x(job): pass
            kiln_app.enqueue("x")
            kiln_jobs.assert_enqueued("x")
    """)
    pytester.runpytest(*SYNC).assert_outcomes(passed=1)


def test_an_app_on_a_frameworks_connection_stays_on_its_database(
        pytester: pytest.Pytester) -> None:
    """An App whose enqueue joins a framework's connection (kiln.contrib.django.App, by
    its ``_testing_database_url``) is bound to that database, not to one of kiln's."""
    own = pytester.path / "framework.db"
    pytester.makepyfile(framework=f"""
        import kiln

        class FrameworkApp(kiln.App):
            def _testing_database_url(self):
                return "sqlite:///{own}"

        app = FrameworkApp("sqlite:///{own}")
        app.register("ping", lambda job: None)
    """)
    project(pytester, "kiln_app = framework:app", test_it=f"""
        import framework

        def test_on_its_own_database(kiln_app, kiln_jobs, kiln_database_url):
            assert kiln_app is framework.app and kiln_app.url == "sqlite:///{own}"
            assert kiln_database_url != kiln_app.url  # kiln's own, unused here
            kiln_app.migrate()
            kiln_app.enqueue("ping")
            kiln_jobs.assert_enqueued("ping", count=1)
            assert kiln_jobs.drain().completed == 1
    """)
    pytester.runpytest(*SYNC).assert_outcomes(passed=1)


@pytest.mark.parametrize(("spec", "problem"), [
    ("proj", "kiln_app = 'proj': name it as module:attribute"),
    ("nowhere:app", "kiln_app = 'nowhere:app': cannot import nowhere"),
    ("proj:missing", "kiln_app = 'proj:missing': proj has no attribute 'missing'"),
])
def test_a_bad_app_name_says_what_is_wrong(
    pytester: pytest.Pytester, spec: str, problem: str
) -> None:
    project(pytester)
    with pytest.raises(pytest.UsageError) as info:
        load_target(spec)
    assert problem in str(info.value)


def test_a_bad_app_setting_fails_the_tests_that_use_it(pytester: pytest.Pytester) -> None:
    project(pytester, "kiln_app = proj:not_an_app", test_it="""
        def test_it(kiln_app):
            pass

        def test_other():
            pass
    """)
    result = pytester.runpytest(*SYNC)
    result.assert_outcomes(passed=1, errors=1)
    assert "kiln_app = 'proj:not_an_app' is a int: name a kiln.App, or a function" \
        in result.stdout.str()
    result = pytester.runpytest(*SYNC, "--kiln-app", "proj:ping")
    assert "kiln_app = 'proj:ping' returned None, not a kiln.App" in result.stdout.str()


class Config:
    """What _setting reads of a pytest.Config."""

    def __init__(self, option: str | None, ini: str | None) -> None:
        self.option, self.ini = option, ini

    def getoption(self, name: str) -> str | None:
        return self.option

    def getini(self, name: str) -> str | None:
        return self.ini


def test_the_url_setting_command_line_then_environment_then_ini(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = "KILN_TEST_DATABASE_URL"
    monkeypatch.setenv(env, "from-env")
    assert _setting(Config("from-cli", "from-ini"), "kiln_url", env) == "from-cli"  # type: ignore[arg-type]
    assert _setting(Config(None, "from-ini"), "kiln_url", env) == "from-env"  # type: ignore[arg-type]
    monkeypatch.delenv(env)
    assert _setting(Config(None, "from-ini"), "kiln_url", env) == "from-ini"  # type: ignore[arg-type]
    assert _setting(Config(None, None), "kiln_url", env) is None  # type: ignore[arg-type]


def test_the_environment_and_the_ini_reach_the_fixture(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.plugins.databases import POSTGRES_URL

    project(pytester, "kiln_url = mysql://nobody@127.0.0.1:1/none", test_it="""
        import os

        def test_scheme(kiln_database_url):
            assert kiln_database_url.split(":")[0] == os.environ["EXPECTED"]
    """)
    monkeypatch.setenv("KILN_TEST_DATABASE_URL", POSTGRES_URL)
    monkeypatch.setenv("EXPECTED", "postgresql")
    pytester.runpytest(*SYNC).assert_outcomes(passed=1)
    monkeypatch.delenv("KILN_TEST_DATABASE_URL")
    result = pytester.runpytest(*SYNC, "--kiln-url", "redis://localhost")
    assert "use sqlite, postgresql://... or mysql://..." in result.stdout.str()
    result = pytester.runpytest(*SYNC)  # the ini's server, which is not there
    result.assert_outcomes(errors=1)
    assert "cannot reach MySQL" in result.stdout.str()


def test_async_tests_drain_on_their_loop_and_leave_nothing_open(
    pytester: pytest.Pytester,
) -> None:
    project(pytester, "kiln_app = proj:app\nasyncio_mode = auto\n"
            "asyncio_default_fixture_loop_scope = function\n"
            # "-p asyncio" names the entry point, and the stdlib module already imported
            "filterwarnings =\n    error\n    ignore::pytest.PytestAssertRewriteWarning",
            test_it="""
        import asyncio
        import proj

        import pytest

        opened = []

        @pytest.fixture(autouse=True)
        def closed_after():  # set up before kiln_app, so torn down after it
            yield
            assert all(store._conn is None for store in opened)
            opened.clear()

        async def test_it(kiln_app, kiln_jobs):
            await proj.app.aenqueue("ping", {})
            opened.extend(client._store for client in kiln_app._clients.values())
            assert opened
            drained = await kiln_jobs.adrain()
            assert drained.completed == 1
            done = await kiln_jobs.aperform("ping", {"n": 1})
            assert done.outcome == "completed"
            kiln_jobs.refute_enqueued()

        def test_sync_after_async(kiln_jobs):
            proj.app.enqueue("ping", {})
            assert kiln_jobs.drain().completed == 1
    """)
    pytester.runpytest(*PLUGIN, "-p", "asyncio").assert_outcomes(passed=2)


def test_loading_the_plugin_twice_registers_it_once(pytester: pytest.Pytester) -> None:
    project(pytester, test_it="""
        def test_it(kiln_jobs):
            kiln_jobs.refute_enqueued()
    """)
    pytester.makeconftest('pytest_plugins = ["kiln.testing.pytest_plugin"]')
    pytester.runpytest(*SYNC).assert_outcomes(passed=1)


def test_the_entry_point_imports_nothing_of_kiln_and_kiln_nothing_of_testing() -> None:
    code = textwrap.dedent("""
        import sys, kiln_pytest
        print(sorted(m for m in sys.modules if m.split('.')[0] == 'kiln'))
        import kiln, kiln.cli, kiln._server.maintenance, kiln.web
        app = kiln.App("sqlite:///unused.db")
        app.register("k", print)
        app.server(queues={"q": 1})
        print(sorted(m for m in sys.modules if m.startswith('kiln.testing')))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True, cwd=ROOT)
    assert out.stdout.split() == ["[]", "[]"]


def test_the_entry_point_is_declared_under_the_modules_name() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert '[project.entry-points.pytest11]\n"kiln.testing.pytest_plugin" = "kiln_pytest"' in text


def test_the_shim_holds_every_hook_and_fixture_of_the_plugin() -> None:
    import kiln_pytest
    from kiln.testing import pytest_plugin

    wanted = {n for n in vars(kiln_pytest) if n.startswith(("pytest_", "kiln_", "_kiln_"))}
    assert wanted <= set(pytest_plugin.__all__)
    assert all(getattr(pytest_plugin, n) is getattr(kiln_pytest, n) for n in wanted)


def scratch_schemas(url: str) -> set[str]:
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'kiln_test_%'")
        return {str(r[0]) for r in rows}


def test_on_postgresql_one_schema_per_session_emptied_before_each_test(
    pytester: pytest.Pytester,
) -> None:
    from tests.plugins.databases import POSTGRES_URL, unavailable

    try:
        scratch_schemas(POSTGRES_URL)
    except Exception as exc:  # psycopg.OperationalError: no server here
        unavailable("postgres", str(exc))
    project(pytester, f"kiln_app = proj:app\nkiln_url = {POSTGRES_URL}", test_it="""
        import pathlib

        import proj

        urls = []

        def test_first(kiln_app, kiln_jobs):
            urls.append(kiln_app.url)
            pathlib.Path("used_url.txt").write_text(kiln_app.url)
            assert proj.app.enqueue("ping", {"n": 1}) == 1
            proj.app.enqueue("ping", {"n": 2})
            kiln_jobs.drain(max_jobs=1)

        def test_second_starts_empty_and_from_id_1(kiln_app, kiln_jobs):
            assert kiln_app.url == urls[0]
            kiln_jobs.refute_enqueued(state=["available", "completed"])
            assert proj.app.enqueue("ping", {"n": 3}) == 1
    """)
    pytester.runpytest(*SYNC).assert_outcomes(passed=2)
    # the session's own schema is dropped at its end (other tests, in this process or
    # another, make and drop scratch schemas meanwhile: only this one is compared)
    used = parse_qs(urlsplit((pytester.path / "used_url.txt").read_text()).query)
    [schema] = [o.removeprefix("-csearch_path=") for o in used["options"]]
    assert schema.startswith("kiln_test_")
    assert schema not in scratch_schemas(POSTGRES_URL)


def test_scratch_operations_refuse_what_they_did_not_make() -> None:
    import asyncio

    from kiln import ConfigError
    from kiln.stores._scratch import scratch_drop, scratch_reset

    for call in (scratch_drop, scratch_reset):
        with pytest.raises(ConfigError, match="not a scratch database made by kiln"):
            asyncio.run(call("postgresql://postgres@127.0.0.1/test?options=-csearch_path%3Dpublic"))
    with pytest.raises(ConfigError, match="not a scratch database"):
        asyncio.run(scratch_drop("mysql://root@127.0.0.1:3306/test"))
