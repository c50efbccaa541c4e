"""The tiers (tests/plugins/tiers.py): every test in exactly one, selectable with -m."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugins.tiers import SLOW

ROOT = Path(__file__).resolve().parents[1]
PLANTED = """
import pytest

@pytest.fixture
def store_url():
    return "sqlite://"

def test_plain():
    pass

def test_on_a_database(store_url):
    pass

@pytest.mark.chaos
def test_marked():
    pass
"""


@pytest.fixture(autouse=True)
def _named_plugins_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # the inner runs of pytester load the tiers plugin alone (not pytest-asyncio's warning)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")


REPORT = """
import sys
import pytest
class Report:
    def pytest_collection_finish(self, session):
        from tests.plugins.tiers import TIERS  # loaded by then, by tests/conftest.py
        for item in session.items:
            tiers = sorted(m.name for m in item.iter_markers() if m.name in TIERS)
            print("TIERS", item.nodeid, " ".join(tiers), sep="\\t")

sys.exit(pytest.main(["--collect-only", "-q", "-n", "0", "-p", "no:cacheprovider",
                      *sys.argv[1:]], plugins=[Report()]))
"""


def tiers(*args: str) -> dict[str, list[str]]:
    """The tiers of every test that ``pytest --collect-only ARGS`` of the suite collects."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    result = subprocess.run([sys.executable, "-c", REPORT, *args], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line.split("\t") for line in result.stdout.splitlines()
             if line.startswith("TIERS\t")]
    return {nodeid: names.split() for _, nodeid, names in lines}


def test_a_test_gets_its_tier_by_its_fixtures_or_its_marker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_planted=PLANTED)
    base = ("-p", "tests.plugins.tiers", "-W", "ignore::pytest.PytestUnknownMarkWarning",
            "--collect-only", "-q")
    for tier, names in [("unit", ["test_plain"]), ("integration", ["test_on_a_database"]),
                        ("chaos", ["test_marked"])]:
        result = pytester.runpytest(*base, "-m", tier)
        assert [line.split("::")[1] for line in result.outlines if "::" in line] == names


def test_a_test_in_two_tiers_stops_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_doubled="""
import pytest

@pytest.mark.chaos
@pytest.mark.browser
def test_both():
    pass
""")
    result = pytester.runpytest("-p", "tests.plugins.tiers", "-W",
                                "ignore::pytest.PytestUnknownMarkWarning", "--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "test_doubled.py::test_both: browser, chaos" in result.stderr.str()


def test_the_directories_give_the_tiers() -> None:
    found = tiers("tests/stores/test_conformance_schema_version.py", "tests/test_backoff.py",
                  "tests/web/test_browser.py", "tests/web/test_pages.py",
                  "tests/chaos/test_chaos.py", "tests/chaos/test_ledger.py",
                  "tests/integration/test_rejoin.py", "tests/test_server_state.py",
                  "tests/test_cli.py")
    by_file: dict[str, set[str]] = {}
    for nodeid, names in found.items():
        assert len(names) == 1, (nodeid, names)
        by_file.setdefault(nodeid.split("::")[0], set()).update(names)
    assert by_file == {
        "tests/stores/test_conformance_schema_version.py": {"conformance"},
        "tests/test_backoff.py": {"unit"},
        "tests/web/test_browser.py": {"browser"},
        "tests/web/test_pages.py": {"integration"},  # on a database of each backend
        "tests/chaos/test_chaos.py": {"chaos"},
        "tests/chaos/test_ledger.py": {"unit"},
        "tests/integration/test_rejoin.py": {"integration"},
        "tests/test_server_state.py": {"unit"},  # a SQLite file
        "tests/test_cli.py": {"unit", "integration"},  # with and without a database
    }


@pytest.mark.slow
def test_every_test_of_the_suite_has_exactly_one_tier() -> None:
    found = tiers()
    assert len(found) > 2500
    assert [nodeid for nodeid, names in found.items() if len(names) != 1] == []


def test_every_slow_entry_names_a_test() -> None:
    # a renamed test would drop out of SLOW silently
    for entry in SLOW:
        path, _, function = entry.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        assert not function or f"def {function}(" in source, entry
