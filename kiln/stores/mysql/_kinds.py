"""MySQL/MariaDB plans for published kind declarations (kiln_kinds).

Owns these statements only. ``published_at`` is the database clock's
(``UTC_TIMESTAMP(6)``).
"""

from __future__ import annotations

from collections.abc import Sequence

from kiln._model._job import KindDeclaration, PublishedKind
from kiln.stores._rows import dumps, loads
from kiln.stores.mysql._columns import NOW
from kiln.stores.mysql._plan import Plan, Stmt, from_db_required, marks, one, step


def _live(table: str) -> str:
    """A row is live while its server is registered (a server that rejoins under a new
    id publishes again)."""
    return f"EXISTS (SELECT 1 FROM kiln_servers s WHERE s.id = {table}.server_id)"


PUBLISH = (
    "INSERT INTO kiln_kinds (kind, server_id, host, pid, options, digest, published_at)"
    f" VALUES (%s, %s, %s, %s, %s, %s, {NOW}) ON DUPLICATE KEY UPDATE"
    " host = VALUES(host), pid = VALUES(pid), options = VALUES(options),"
    " digest = VALUES(digest), published_at = VALUES(published_at)"
)
# a kind's declaration in use: the newest a live server published, else the newest (a
# kind whose servers are all down still resolves)
NEWEST = (
    "SELECT kind, options, digest FROM (SELECT kind, options, digest, ROW_NUMBER() OVER"
    f" (PARTITION BY kind ORDER BY {_live('k')} DESC, published_at DESC, server_id DESC)"
    " AS n FROM kiln_kinds k) t WHERE n = 1 ORDER BY kind"
)
LIST = (
    f"SELECT k.kind, k.options, k.digest, k.server_id, k.host, k.published_at, {_live('k')}"
    " FROM kiln_kinds k ORDER BY k.kind, k.published_at DESC, k.server_id DESC"
)
CONFLICTS = (
    f"SELECT COUNT(*) FROM (SELECT k.kind FROM kiln_kinds k WHERE {_live('k')}"
    " GROUP BY k.kind HAVING COUNT(DISTINCT k.digest) > 1) c"
)


def _drop_gone(kinds: Sequence[str], server_id: str) -> Stmt:
    return Stmt(
        f"DELETE FROM kiln_kinds WHERE kind IN ({marks(len(kinds))}) AND server_id <> %s"
        f" AND NOT {_live('kiln_kinds')}",
        (*kinds, server_id),
    )


def publish(
    server_id: str, host: str, pid: int, kinds: Sequence[KindDeclaration]
) -> Plan[None]:
    stmts = [_drop_gone([d.kind for d in kinds], server_id)]
    stmts += [
        Stmt(PUBLISH, (d.kind, server_id, host, pid, dumps(d.options), d.digest)) for d in kinds
    ]
    yield step(*stmts, begin=True, last=True)


def newest() -> Plan[list[KindDeclaration]]:
    out = yield one(NEWEST)
    return [KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2]) for r in out[0].rows]


def listed() -> Plan[list[PublishedKind]]:
    out = yield one(LIST)
    return [
        PublishedKind(
            declaration=KindDeclaration(kind=r[0], options=loads(r[1]), digest=r[2]),
            server_id=r[3], host=r[4], published_at=from_db_required(r[5]), live=bool(r[6]),
        )
        for r in out[0].rows
    ]


def conflicts() -> Plan[int]:
    out = yield one(CONFLICTS)
    return int(out[0].rows[0][0])
