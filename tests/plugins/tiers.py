"""Every test belongs to exactly one tier, a marker that ``-m`` selects (docs/testing.md).

- ``chaos``, ``deploy_sequence``, ``contention``: marked in their modules (tests/chaos,
  tests/deploys), as before;
- ``conformance``: tests/stores, the store contract on every backend;
- ``browser``: tests/web/test_browser*.py, a real Chromium against a served dashboard;
- ``integration``: the directories of servers, worker processes and frameworks
  (``INTEGRATION_DIRS``), and any other test that uses a database server (its fixtures
  reach ``store_url``, ``mysql_url`` or a ``pg_url``), or ``INTEGRATION_FILES``;
- ``unit``: the rest: in one process, with no database server (a SQLite file at most).

``slow`` (not a tier) marks the tests in ``SLOW``: those that took more than about 5 s
alone (more than 12 s on a loaded 2-core machine, ``--durations``), and by judgement the
chaos, deploy-sequence, contention and live Prometheus modules; ``-m "not slow"`` leaves
them out.

The tiers are given at collection (``pytest_collection_modifyitems``); a test that ends
with two tiers stops the run, so a new marker cannot put one test in two tiers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS = ("unit", "conformance", "integration", "chaos", "browser", "deploy_sequence",
         "contention")
INTEGRATION_DIRS = {"integration", "cluster", "flow", "results", "frameworks"}
INTEGRATION_FILES = {"ops/test_live_prometheus.py"}  # a real Prometheus scraping servers
DATABASE_FIXTURES = {"store_url", "mysql_url", "pg_url"}
TESTS = Path(__file__).resolve().parents[1]
SLOW = {  # a module, or a test function with all its parameters
    "tests/chaos/test_chaos.py",
    "tests/deploys/test_deploys.py",
    "tests/deploys/test_contention.py",
    "tests/ops/test_live_prometheus.py",
    "tests/otel/test_rate_limit_metrics.py",  # drains a backlog at 5 a second, per store
    "tests/ops/test_alerts.py::test_promtool_unit_tests",
    "tests/cluster/test_rescue.py",
    "tests/cluster/test_recurring.py::test_every_slot_once_across_servers_and_leader_changes",
    "tests/cluster/test_fencing.py::"
    "test_cut_off_worker_fences_before_rescue_and_late_result_is_fenced",
    "tests/flow/test_checkpoints.py::test_killed_worker_job_resumes_on_another_worker",
    "tests/flow/test_rate_limit_property.py::test_no_window_admits_more_than_rate_plus_burst",
    "tests/integration/test_kinds.py::test_a_published_unique_kind_is_unique_from_the_cli",
    "tests/integration/test_kinds.py::test_kiln_kinds_lists_declarations_servers_and_conflicts",
    "tests/integration/test_operating_docs.py::"
    "test_the_cooperative_handler_stops_in_time_and_resumes",
    "tests/otel/test_cluster_metrics.py::"
    "test_a_rescued_job_is_counted_and_its_next_attempt_says_so",
    "tests/stores/test_online_migrations.py::"
    "test_migrations_leave_claims_and_inserts_running",
    "tests/stores/test_online_migrations.py::test_one_transaction_holds_the_claims",
    "tests/test_cli_worker.py::test_worker_runs_jobs_serves_health_and_stops_on_sigterm",
    "tests/test_cli_worker.py::test_a_failing_job_and_the_shutdown_wait_are_in_the_worker_log",
    "tests/test_cli_worker.py::test_a_log_level_per_event",
    "tests/test_names.py::test_cli_tables_escape_control_characters",
    "tests/web/test_requeue_guard.py::test_cancel_then_requeue_waits_for_the_running_attempt",
}


def tier_of(item: pytest.Item) -> str:
    """The tier ``item`` gets by its place and fixtures (when not marked with one)."""
    try:
        path = item.path.resolve().relative_to(TESTS)
    except ValueError:  # a test outside tests/ (pytester's): by its fixtures only
        path = Path(item.path.name)
    top = path.parts[0] if len(path.parts) > 1 else ""
    if top == "stores":
        return "conformance"
    if top == "web" and path.name.startswith("test_browser"):
        return "browser"
    if top in INTEGRATION_DIRS or path.as_posix() in INTEGRATION_FILES:
        return "integration"
    if DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return "integration"
    return "unit"


def tiers_of(item: pytest.Item) -> list[str]:
    """The tier markers ``item`` carries."""
    return sorted({m.name for m in item.iter_markers() if m.name in TIERS})


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    doubled = []
    for item in items:
        function = item.nodeid.split("[")[0]
        if function in SLOW or function.split("::")[0] in SLOW:
            item.add_marker("slow")
        marked = tiers_of(item)
        if not marked:
            item.add_marker(tier_of(item))
        elif len(marked) > 1:
            doubled.append(f"{item.nodeid}: {', '.join(marked)}")
    if doubled:
        raise pytest.UsageError("tests in more than one tier:\n" + "\n".join(doubled))
