"""PostgreSQL plan for the jobs table's size, from the catalog and statistics views.

Owns this statement only. ``reltuples`` is the planner's estimate (-1 until the table
is first vacuumed or analyzed, when the statistics collector's live count stands in);
``n_dead_tup`` counts dead tuples autovacuum has not yet reclaimed;
``pg_total_relation_size`` includes indexes and TOAST.
"""

from __future__ import annotations

from kiln.stores._protocol import TableSize
from kiln.stores.postgres._plan import Plan, one

SIZES = (
    "SELECT c.relname, CASE WHEN c.reltuples < 0 THEN coalesce(s.n_live_tup, 0)"
    " ELSE c.reltuples::bigint END, coalesce(s.n_dead_tup, 0),"
    " pg_total_relation_size(c.oid)"
    " FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid"
    " WHERE c.oid = to_regclass('kiln_jobs')"
)


def sizes() -> Plan[list[TableSize]]:
    rows = (yield one(SIZES))[0]
    return [TableSize(table=r[0], rows=int(r[1]), bytes=int(r[3]), dead_rows=int(r[2]))
            for r in rows]
