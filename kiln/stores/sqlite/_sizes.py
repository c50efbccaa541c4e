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

SPAN = "SELECT COALESCE(MAX(id) - MIN(id) + 1, 0) FROM kiln_jobs"


def sizes(conn: sqlite3.Connection) -> list[TableSize]:
    rows = int(conn.execute(SPAN).fetchone()[0])
    page = int(conn.execute("PRAGMA page_size").fetchone()[0])
    pages = int(conn.execute("PRAGMA page_count").fetchone()[0])
    free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    return [TableSize(table="kiln_jobs", rows=rows, bytes=pages * page, free_bytes=free * page)]
