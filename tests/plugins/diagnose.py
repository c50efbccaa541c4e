"""What the databases were doing when a test ran out of time.

A test that hits pytest-timeout on this suite is almost always waiting on something
outside its process: a lock, a session that never ended, a server that stopped
answering. The thread dump shows the waiting side only. For such a failure, this adds a
section to the report with PostgreSQL's side of it: every session that is not idle
(its application, state, age, wait and query), the locks not granted and the advisory
locks held. It reads with a connection of its own and a short timeout, and a read that
fails says so in the section instead of failing anything.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from tests.plugins.databases import POSTGRES_URL

SESSIONS = """
SELECT pid, application_name, state, backend_type,
       (now() - xact_start)::interval(0) AS in_transaction,
       wait_event_type || ':' || coalesce(wait_event, '') AS waiting,
       left(regexp_replace(query, '\\s+', ' ', 'g'), 200) AS query
FROM pg_stat_activity
WHERE pid <> pg_backend_pid() AND datname = current_database()
  AND (state IS DISTINCT FROM 'idle' OR xact_start IS NOT NULL)
ORDER BY xact_start NULLS LAST
"""
LOCKS = """
SELECT l.pid, l.locktype, l.mode, l.granted, l.classid, l.objid,
       coalesce(c.relname, '') AS relation
FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
WHERE l.pid <> pg_backend_pid() AND (NOT l.granted OR l.locktype = 'advisory')
ORDER BY l.granted, l.pid
"""


def postgres_state() -> str:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=3) as conn:
            conn.execute("SET statement_timeout = '3s'")
            lines = ["sessions not idle:"]
            lines += [_row(r) for r in conn.execute(SESSIONS).fetchall()]
            lines.append("locks waited for, and advisory locks held:")
            lines += [_row(r) for r in conn.execute(LOCKS).fetchall()]
            return "\n".join(lines)
    except Exception as exc:  # a diagnosis must not fail the report
        return f"could not read PostgreSQL's state: {exc!r}"


def _row(row: tuple[Any, ...]) -> str:
    return "  " + " | ".join("" if v is None else str(v) for v in row)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and "Timeout (>" in str(report.longrepr):
        report.sections.append(("PostgreSQL at the timeout", postgres_state()))


REAP_FOR = 10.0  # seconds a test's leftover tasks are cancelled again and again


async def _reap(tasks: set[asyncio.Task[Any]]) -> set[asyncio.Task[Any]]:
    """Cancel ``tasks`` every 0.1 s until they end, at most REAP_FOR; those left."""
    deadline = time.monotonic() + REAP_FOR
    pending = tasks
    while pending and time.monotonic() < deadline:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=0.1)
    return pending


@pytest.fixture(autouse=True)
def _leftover_tasks(request: pytest.FixtureRequest) -> Iterator[None]:
    """An async test's tasks still running after its fixtures ended (a task a stop left
    behind, a cancellation Python 3.11's wait_for dropped) are cancelled again and again
    before pytest-asyncio closes the loop, which cancels them once and then waits without
    a bound: the 120 s timeouts at teardown that CI showed. A task that outlives that is
    named in the report."""
    if not inspect.iscoroutinefunction(getattr(request.node, "function", None)):
        yield
        return
    runner = request.getfixturevalue("_function_scoped_runner")
    yield
    loop = runner.get_loop()
    left = {t for t in asyncio.all_tasks(loop) if not t.done()}
    if left:
        stuck = loop.run_until_complete(_reap(left))
        assert not stuck, f"tasks still running {REAP_FOR:.0f}s after the test: " + ", ".join(
            sorted(t.get_name() for t in stuck))
