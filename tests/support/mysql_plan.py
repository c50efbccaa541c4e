"""Run a MariaDB plan (kiln.stores.mysql._plan) statement by statement on a cursor the
test holds, so the test can read the session's counters around it."""

from __future__ import annotations

from typing import Any

from kiln.stores.mysql._plan import Result


def run_plan(cur: Any, plan: Any) -> Any:
    """Drive ``plan`` on ``cur``; return what the plan returns."""
    st = next(plan)
    while True:
        results = []
        for stmt in st.stmts:
            cur.execute(stmt.sql, tuple(stmt.params) or None)
            results.append(Result(list(cur.fetchall()), cur.rowcount, cur.lastrowid))
        try:
            st = plan.send(results)
        except StopIteration as stop:
            return stop.value
