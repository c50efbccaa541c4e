"""SQLite statements for published kind declarations (kiln_kinds).

Owns these statements only; ``publish`` runs inside ``write`` (BEGIN IMMEDIATE).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

from kiln._model._job import KindDeclaration, PublishedKind
from kiln.stores._rows import dumps, loads, ts_required

# a row is live while its server is registered (a server that rejoins under a new id
# publishes again)
LIVE = "EXISTS (SELECT 1 FROM kiln_servers s WHERE s.id = k.server_id)"
DROP_GONE = (
    "DELETE FROM kiln_kinds AS k WHERE k.kind = ? AND k.server_id <> ? AND NOT " + LIVE
)
PUBLISH = (
    "INSERT INTO kiln_kinds (kind, server_id, host, pid, options, digest, published_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (kind, server_id) DO UPDATE SET"
    " host = excluded.host, pid = excluded.pid, options = excluded.options,"
    " digest = excluded.digest, published_at = excluded.published_at"
)
# a kind's declaration in use: the newest a live server published, else the newest (a
# kind whose servers are all down still resolves)
NEWEST = (
    "SELECT kind, options, digest FROM (SELECT kind, options, digest, ROW_NUMBER() OVER"
    f" (PARTITION BY kind ORDER BY {LIVE} DESC, published_at DESC, server_id DESC) AS n"
    " FROM kiln_kinds AS k) WHERE n = 1 ORDER BY kind"
)
LIST = (
    f"SELECT k.kind, k.options, k.digest, k.server_id, k.host, k.published_at, {LIVE}"
    " FROM kiln_kinds AS k ORDER BY k.kind, k.published_at DESC, k.server_id DESC"
)
CONFLICTS = (
    f"SELECT COUNT(*) FROM (SELECT k.kind FROM kiln_kinds AS k WHERE {LIVE}"
    " GROUP BY k.kind HAVING COUNT(DISTINCT k.digest) > 1)"
)


def publish(
    conn: sqlite3.Connection, server_id: str, host: str, pid: int,
    kinds: Sequence[KindDeclaration],
) -> None:
    now = time.time()
    for d in kinds:
        conn.execute(DROP_GONE, (d.kind, server_id))
        conn.execute(PUBLISH, (d.kind, server_id, host, pid, dumps(d.options), d.digest, now))


def newest(conn: sqlite3.Connection) -> list[KindDeclaration]:
    return [
        KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2])
        for r in conn.execute(NEWEST).fetchall()
    ]


def listed(conn: sqlite3.Connection) -> list[PublishedKind]:
    return [
        PublishedKind(
            declaration=KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2]),
            server_id=r[3], host=r[4], published_at=ts_required(r[5]), live=bool(r[6]),
        )
        for r in conn.execute(LIST).fetchall()
    ]


def conflicts(conn: sqlite3.Connection) -> int:
    return int(conn.execute(CONFLICTS).fetchone()[0])
