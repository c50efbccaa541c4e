"""SQLite statements for the jobs table's size.

Owns these statements only. SQLite keeps no per-table statistics that are cheap to
read, so ``rows`` is the span of ids (``max(id) - min(id) + 1``, two index lookups: an
upper bound, since rows deleted between the ends still count), ``bytes`` the whole
database file (``page_count * page_size``, which the jobs table dominates) and
``free_bytes`` its free pages (``freelist_count * page_size``, reused before the file
grows, returned by VACUUM).
"""

from __future__ import annotations

import sqlite3

from kiln.stores._protocol import TableSize

# one subquery for each end: SQLite reads MIN or MAX from an index's end only when it is
# the query's one aggregate; MAX(id) - MIN(id) in one SELECT read every row (0.85 s at
# 10,000,000 jobs; tests/stores/test_sqlite_maintenance_plans.py)
SPAN = ("SELECT COALESCE((SELECT MAX(id) FROM kiln_jobs) - (SELECT MIN(id) FROM kiln_jobs)"
        " + 1, 0)")


def sizes(conn: sqlite3.Connection) -> list[TableSize]:
    rows = int(conn.execute(SPAN).fetchone()[0])
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return [TableSize(table="kiln_jobs", rows=rows, bytes=pages * page, free_bytes=free * page)]
