"""MariaDB/MySQL plan for the jobs table's size, from information_schema.TABLES.

Owns this statement only. For InnoDB ``TABLE_ROWS`` is an estimate, ``DATA_LENGTH +
INDEX_LENGTH`` the allocated size and ``DATA_FREE`` the allocated but unused bytes
(space deleted rows left behind); none of them scans the table.
"""

from __future__ import annotations

from kiln.stores._protocol import TableSize
from kiln.stores.mysql._plan import Plan, one

SIZES = (
    "SELECT TABLE_NAME, COALESCE(TABLE_ROWS, 0),"
    " COALESCE(DATA_LENGTH, 0) + COALESCE(INDEX_LENGTH, 0), COALESCE(DATA_FREE, 0)"
    " FROM information_schema.TABLES"
    " WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'kiln_jobs'"
)


def sizes() -> Plan[list[TableSize]]:
    out = yield one(SIZES)
    return [TableSize(table=str(r[0]), rows=int(r[1]), bytes=int(r[2]), free_bytes=int(r[3]))
            for r in out[0].rows]
