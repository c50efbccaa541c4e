"""PostgreSQL plans for published kind declarations (kiln_kinds).

Owns these statements only. ``published_at`` is the database clock's.
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import KindDeclaration, PublishedKind
from kiln.stores._rows import dumps, loads
from kiln.stores.postgres._plan import Plan, Stmt, one, step

# a row is live while its server is registered (a server that rejoins under a new id
# publishes again)
LIVE = "EXISTS (SELECT 1 FROM kiln_servers s WHERE s.id = k.server_id)"
DROP_GONE = (
    "DELETE FROM kiln_kinds k WHERE k.kind = ANY(%s::text[]) AND k.server_id <> %s"
    " AND NOT " + LIVE
)
PUBLISH = (
    "INSERT INTO kiln_kinds (kind, server_id, host, pid, options, digest, published_at)"
    " VALUES (%s, %s, %s, %s, %s::jsonb, %s, now()) ON CONFLICT (kind, server_id) DO UPDATE"
    " SET host = excluded.host, pid = excluded.pid, options = excluded.options,"
    " digest = excluded.digest, published_at = excluded.published_at"
)
# a kind's declaration in use: the newest a live server published, else the newest (a
# kind whose servers are all down still resolves)
NEWEST = (
    "SELECT DISTINCT ON (kind) kind, options, digest FROM kiln_kinds k"
    f" ORDER BY kind, {LIVE} DESC, published_at DESC, server_id DESC"
)
LIST = (
    f"SELECT k.kind, k.options, k.digest, k.server_id, k.host, k.published_at, {LIVE}"
    " FROM kiln_kinds k ORDER BY k.kind, k.published_at DESC, k.server_id DESC"
)
CONFLICTS = (
    f"SELECT count(*) FROM (SELECT k.kind FROM kiln_kinds k WHERE {LIVE}"
    " GROUP BY k.kind HAVING count(DISTINCT k.digest) > 1) c"
)


def publish(
    server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
) -> Plan[None]:
    stmts = [Stmt(DROP_GONE, ([d.kind for d in kinds], server_id))]
    stmts += [
        Stmt(PUBLISH, (d.kind, server_id, host, pid, dumps(d.options), d.digest)) for d in kinds
    ]
    yield step(*stmts, last=True)


def newest() -> Plan[list[KindDeclaration]]:
    rows = (yield one(NEWEST))[0]
    return [KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2]) for r in rows]


def listed() -> Plan[list[PublishedKind]]:
    rows = (yield one(LIST))[0]
    return [
        PublishedKind(
            declaration=KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2]),
            server_id=r[3], host=r[4], published_at=r[5], live=bool(r[6]),
        )
        for r in rows
    ]


def conflicts() -> Plan[int]:
    rows = (yield one(CONFLICTS))[0]
    return int(rows[0][0])
