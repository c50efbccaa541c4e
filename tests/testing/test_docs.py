"""docs/testing.md: every block headed by a file name is written into a project of its
own, and pytest runs it with the plugin, on every backend; the failure the page shows
is the failure pytest prints, line for line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docblocks import code_blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
HEADER = re.compile(r"# file: (\S+)\n")
# the inner runs load only the plugin, as the entry point will (and no other: faster)
PLUGIN = ("-p", "kiln.testing.pytest_plugin", "-p", "no:cacheprovider")
# the page's project also loads pytest-asyncio, which its async FastAPI test uses
PAGE = (*PLUGIN, "-p", "pytest_asyncio.plugin")


@pytest.fixture(autouse=True)
def _named_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


def blocks(lang: str) -> list[str]:
    return code_blocks(DOC, lang)


def files() -> dict[str, str]:
    """Every python and toml block that names its file."""
    found: dict[str, str] = {}
    for kind in ("python", "toml"):
        for body in blocks(kind):
            head = HEADER.match(body)
            if head:
                found[head.group(1)] = body[head.end():]
    return found


def test_every_python_example_names_its_file() -> None:
    unnamed = [b.splitlines()[0] for b in blocks("python") if not HEADER.match(b)]
    assert not unnamed, f"docs/testing.md has python blocks no test runs: {unnamed}"


def write_project(pytester: pytest.Pytester, ini_extra: str = "") -> None:
    for name, body in files().items():
        if name == "pyproject.toml":
            body += ini_extra
        path = pytester.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body)
    pytester.syspathinsert()


def kiln_url_line(url: str) -> str:
    """The page's kiln_url example, pointed at this test's server."""
    [example] = [b for b in blocks("toml") if "kiln_url" in b]
    line = next(x for x in example.splitlines() if x.startswith("kiln_url"))
    assert line.startswith('kiln_url = "postgresql://')
    return f'kiln_url = "{url}"\n'


def check_run(result: pytest.RunResult, backend: str) -> None:
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1, result.stdout.str()
    # the async FastAPI test needs a server: on SQLite it skips itself, saying why
    passed, skipped = (7, 1) if backend == "sqlite" else (8, None)
    assert (outcomes.get("passed"), outcomes.get("skipped")) == (passed, skipped), \
        result.stdout.str()
    if skipped:
        result.stdout.fnmatch_lines(["*cannot join kiln's transaction on SQLite*"])
    result.stdout.fnmatch_lines(["*test_failure.py::test_a_typo_in_the_address*"])
    shown = blocks("text")[0].splitlines()
    printed = [line[8:] for line in result.outlines if line.startswith("E       ")]
    start = printed.index(shown[0])
    assert printed[start:start + len(shown)] == shown


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mysql"])
def test_the_pages_project_runs_as_shown(
    pytester: pytest.Pytester, backend: str, request: pytest.FixtureRequest
) -> None:
    from tests.plugins.databases import BACKENDS, MYSQL_URL, POSTGRES_URL

    if backend not in BACKENDS:
        pytest.skip(f"{backend}: not among this run's backends")
    extra = {"sqlite": "", "postgres": kiln_url_line(POSTGRES_URL),
             "mysql": kiln_url_line(POSTGRES_URL).replace(POSTGRES_URL, MYSQL_URL)}[backend]
    write_project(pytester, extra)
    # in a process of its own: an in-process run imports SQLAlchemy's dialects (for the
    # page's FastAPI test) a second time, which they do not survive
    if backend == "mysql":  # its migrations take seconds per test: drain and FastAPI only
        pytester.runpytest_subprocess(*PAGE, "tests/test_drain.py", "tests/api").assert_outcomes(
            passed=3)
        return
    # PostgreSQL: about 0.4 s per test (a fresh schema, migrated) for the page's 9 tests
    check_run(pytester.runpytest_subprocess(*PAGE, "-rfEs"), backend)


def test_the_pages_fixture_override_replaces_the_plugins(pytester: pytest.Pytester) -> None:
    override = files()["tests/conftest_override_example.py"]
    pytester.makeconftest(override + "\n\nMARK = 'overridden'\n")
    pytester.makepyfile(test_it="""
        import kiln

        def test_it(kiln_app, kiln_jobs):
            assert kiln_jobs.app is kiln_app
            @kiln_app.job("ping")
            def ping(job): pass
            kiln_app.enqueue("ping")
            assert kiln_jobs.drain().completed == 1
    """)
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
