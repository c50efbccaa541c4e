"""MySQL/MariaDB plans for global concurrency limits (kiln._model._concurrency): the limited
claim, the declaration of queue limits (and their sweep and removal), and the running
jobs by key group.

The limited claim is one transaction. The first step locks the rows of the keys whose
jobs wait in the queue (``FOR UPDATE SKIP LOCKED``: a key another server is claiming is
skipped, never waited on), least recently served first, and the row of the queue's own
limit if it has one. The next step reads after those locks were granted, and every
connection kiln opens runs READ COMMITTED (_kept), so each statement reads the latest
committed rows: whatever the previous holder of a lock claimed is visible, and the
count of a key's running jobs is exact. At most ``max - running`` jobs of a key are
taken. Owns these statements only.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from kiln._model._concurrency import group_of, queue_group
from kiln._model._job import JobRow
from kiln.stores._rows import RAN_UNIQUE, dumps
from kiln.stores.mysql._columns import JOB_COLS, NOW, UNPAUSED, row_to_job
from kiln.stores.mysql._plan import Plan, Stmt, marks, micros, one, step

Candidate = tuple[int, int, int, datetime, int]  # rn, priority, key order, run_at, id


# A job cancelled while running whose handler has not ended (attempt_running) holds its
# slot as a running one does (kiln_jobs_ending, migration 15).
ENDING = "attempt_running AND state = 'cancelled'"


def _lock_stmts(
    queue: str, kinds: list[str], room: int, with_keys: bool
) -> tuple[Stmt, ...]:
    """The queue's row (whether it exists, then locked) and, with ``with_keys``, the rows of
    the keys with an available job in the queue and a free slot, locked."""
    qkey = queue_group(queue)
    queue_rows = (
        Stmt("SELECT max FROM kiln_concurrency_keys WHERE conc_key = %s", (qkey,)),
        Stmt("SELECT max FROM kiln_concurrency_keys WHERE conc_key = %s"
             " FOR UPDATE SKIP LOCKED", (qkey,)),
    )
    if not with_keys:
        return queue_rows
    # The probe for an available job of each key is a scalar subquery with LIMIT 1 along
    # kiln_jobs_conc, one index probe per key: as EXISTS, MariaDB materialized it as a
    # semi-join, a scan of the whole table at every claim once the table had statistics
    # (14.8 ms against 2.0 at 20,000 jobs; tests/stores/test_mysql_concurrency_plans.py).
    return (
        *queue_rows,
        Stmt(
            "SELECT c.conc_key, c.max FROM kiln_concurrency_keys c WHERE (SELECT 1"
            " FROM kiln_jobs j WHERE j.state = 'available' AND j.conc_key = c.conc_key"
            f" AND j.queue = %s AND j.kind IN ({marks(len(kinds))})"
            " ORDER BY j.priority, j.run_at, j.id LIMIT 1) = 1"
            " AND (SELECT count(*) FROM kiln_jobs r WHERE r.state = 'running'"
            " AND r.conc_key = c.conc_key) + (SELECT count(*) FROM kiln_jobs r"
            f" WHERE {ENDING} AND r.conc_key = c.conc_key) < c.max"
            " ORDER BY c.last_claimed_at, c.conc_key LIMIT %s FOR UPDATE SKIP LOCKED",
            (queue, *kinds, room),
        ),
    )


def _key_jobs(key: str, queue: str, kinds: list[str], offset: int, limit: int) -> Stmt:
    """A key's available jobs in the queue, in claim order, past the first ``offset``."""
    return Stmt(
        "SELECT id, priority, run_at FROM kiln_jobs WHERE state = 'available'"
        f" AND conc_key = %s AND queue = %s AND kind IN ({marks(len(kinds))}) AND {UNPAUSED}"
        " ORDER BY priority, run_at, id LIMIT %s OFFSET %s", (key, queue, *kinds, limit, offset),
    )


def _cap(room: int, keys: int) -> int:
    """How many jobs of each key the first round reads: ceil(room / keys)."""
    return -(-room // max(keys, 1))


def _read_stmts(
    queue: str, kinds: list[str], room: int, keys: list[tuple[str, int]], queue_max: bool
) -> tuple[Stmt, ...]:
    """After the locks: the queue's running jobs, each key's running jobs and its first
    jobs (read without row locks: only the key's lock holder claims them, so only the
    rows taken are written), and the queue's plain jobs (locked, skipping locked ones).
    A key's first jobs: at most ceil(room / keys) of them, the first round of the
    claim (see ``claim``)."""
    cap = _cap(room, len(keys))
    kind_in = f"kind IN ({marks(len(kinds))})"
    stmts = [Stmt(
        "SELECT (SELECT count(*) FROM kiln_jobs WHERE state = 'running' AND queue = %s)"
        f" + (SELECT count(*) FROM kiln_jobs WHERE {ENDING} AND queue = %s)"
        if queue_max else "SELECT 0", (queue, queue) if queue_max else (),
    )]
    for key, most in keys:
        stmts.append(Stmt(
            "SELECT (SELECT count(*) FROM kiln_jobs WHERE state = 'running' AND conc_key = %s)"
            f" + (SELECT count(*) FROM kiln_jobs WHERE {ENDING} AND conc_key = %s)",
            (key, key),
        ))
        stmts.append(_key_jobs(key, queue, kinds, 0, min(most, cap)))
    stmts.append(Stmt(
        "SELECT id, priority, run_at FROM kiln_jobs WHERE state = 'available' AND queue = %s"
        f" AND conc_key IS NULL AND {kind_in} AND {UNPAUSED}"
        " ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED",
        (queue, *kinds, room),
    ))
    return tuple(stmts)


def claim(
    queue: str, kinds: list[str], limit: int, server_id: str, with_keys: bool = True
) -> Plan[list[JobRow]]:
    """The claim of a pool whose queue may hold limited jobs (see module docstring);
    ``with_keys`` False: only the queue's limit counts, and jobs with a concurrency key
    are left alone (Store.job_claim): no key is locked, counted or read."""
    if not kinds or limit <= 0:
        return []
    limited_queue, locked_queue, *locked = yield step(
        *_lock_stmts(queue, kinds, limit, with_keys), begin=True
    )
    if limited_queue.rows and not locked_queue.rows:  # another server claims from it
        return []
    keys = [(str(r[0]), int(r[1])) for r in locked[0].rows] if locked else []
    qmax = int(locked_queue.rows[0][0]) if locked_queue.rows else None
    out = yield step(*_read_stmts(queue, kinds, limit, keys, qmax is not None))
    room = limit if qmax is None else max(0, min(limit, qmax - int(out[0].rows[0][0])))
    # The first `room` of reading `room` jobs of every key, read as PostgreSQL's claim
    # reads them: a first round of cap = ceil(limit / keys) of each key (_read_stmts),
    # which is the whole claim when the keys have that many; when they fall short by
    # `short`, the rest can only come from later rounds of keys that had more, so a
    # second step reads at most `short` more of each, past its cap (a round trip only
    # then). Reading `limit` of every key fetched ten times the rows a claim of ten
    # keys takes (bench/RESULTS.md, lease40).
    cap = _cap(limit, len(keys))
    found: list[Candidate] = []
    more: list[tuple[int, str, int]] = []  # key order, key, free past the cap
    for order, (key, most) in enumerate(keys):
        free = most - int(out[1 + 2 * order].rows[0][0])
        rows = out[2 + 2 * order].rows[:max(free, 0)]
        found += [(rn, r[1], order, r[2], r[0]) for rn, r in enumerate(rows)]
        if len(rows) == cap and free > cap:
            more.append((order, key, free - cap))
    plain = out[-1].rows
    short = limit - len(found) - min(len(plain), cap)
    found += [(rn, r[1], -1, r[2], r[0]) for rn, r in enumerate(plain)]
    if short > 0 and more:
        later = yield step(*(_key_jobs(key, queue, kinds, cap, min(left, short))
                             for _order, key, left in more))
        for (order, _key, _left), rows_b in zip(more, later, strict=True):
            found += [(cap + rn, r[1], order, r[2], r[0]) for rn, r in enumerate(rows_b.rows)]
    chosen = sorted(found)[:room]
    if not chosen:
        return []
    served = sorted({keys[c[2]][0] for c in chosen if c[2] >= 0})
    return (yield from _take([c[4] for c in chosen], server_id, served))


def _take(ids: list[int], server_id: str, served: list[str]) -> Plan[list[JobRow]]:
    """Mark the jobs running, read them back, and mark the keys they were chosen from
    served (fairness: least recently served first), all in the round trip that commits.
    A job cancelled since it was read is not taken; its key is marked all the same,
    which only moves it back in the order."""
    m = marks(len(ids))
    mark_served = (Stmt(
        f"UPDATE kiln_concurrency_keys SET last_claimed_at = {NOW}"
        f" WHERE conc_key IN ({marks(len(served))})", served,
    ),) if served else ()
    out = yield step(
        Stmt(f"UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, {RAN_UNIQUE},"
             f" attempted_at = {NOW}, server_id = %s WHERE id IN ({m}) AND state = 'available'",
             (server_id, *ids)),
        Stmt(f"SELECT {JOB_COLS} FROM kiln_jobs WHERE id IN ({m})"
             " AND state = 'running' AND server_id = %s", (*ids, server_id)),
        *mark_served,
        last=True,
    )
    jobs = [row_to_job(r) for r in out[1].rows]
    jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
    return jobs


DECLARE = (
    "INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES {rows}"
    " ON DUPLICATE KEY UPDATE max = VALUES(max)"
)


def declare(limits: Mapping[str, int], server_id: str | None = None) -> Plan[None]:
    """Set the max of these keys; with ``server_id``, also record that this server
    declares them (queue limits, which follow their live declarations: ``sweep``)."""
    names = sorted(limits)  # one lock order for every caller
    if not names:
        return
    stmts = [Stmt(DECLARE.format(rows=", ".join(["(%s, %s)"] * len(names))),
                  [x for k in names for x in (k, limits[k])])]
    if server_id is not None:  # the row of an older kiln's declaration ('') gives way
        stmts += [
            Stmt("DELETE FROM kiln_concurrency_declarations WHERE server_id = ''"
                 f" AND conc_key IN ({marks(len(names))})", names),
            Stmt("INSERT INTO kiln_concurrency_declarations (conc_key, server_id, max,"
                 f" declared_at) VALUES {', '.join([f'(%s, %s, %s, {NOW})'] * len(names))}"
                 " ON DUPLICATE KEY UPDATE max = VALUES(max), declared_at = VALUES(declared_at)",
                 [x for k in names for x in (k, server_id, limits[k])]),
        ]
    yield step(*stmts, begin=True, last=True)


# The sweep (see the PostgreSQL plan of the same name): the queue rows are locked
# first, in key order as declare locks them (a server declaring one concurrently either
# committed before, and the statements after the lock read its declaration, or waits
# and writes the row again after); the declarations of servers no longer live are
# forgotten (an older kiln's, '', stay), so every declaration left is live; then the
# queue rows none declares go, and the others take their newest declaration's max if
# it changed.
SWEEP = (
    Stmt("SELECT conc_key FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%%'"
         " ORDER BY conc_key FOR UPDATE"),
    Stmt("DELETE FROM kiln_concurrency_declarations WHERE server_id <> '' AND NOT EXISTS"
         " (SELECT 1 FROM kiln_servers s WHERE s.id = kiln_concurrency_declarations.server_id"
         f" AND s.heartbeat_at >= {NOW} - INTERVAL %s MICROSECOND)"),
    Stmt("SELECT conc_key FROM kiln_concurrency_keys c WHERE c.conc_key LIKE 'queue:%%'"
         " AND NOT EXISTS (SELECT 1 FROM kiln_concurrency_declarations d"
         " WHERE d.conc_key = c.conc_key) ORDER BY c.conc_key FOR UPDATE"),
    Stmt("DELETE FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%%' AND NOT EXISTS"
         " (SELECT 1 FROM kiln_concurrency_declarations d"
         " WHERE d.conc_key = kiln_concurrency_keys.conc_key)"),
    Stmt("UPDATE kiln_concurrency_keys c JOIN (SELECT conc_key, max FROM (SELECT conc_key,"
         " max, ROW_NUMBER() OVER (PARTITION BY conc_key ORDER BY declared_at DESC,"
         " server_id DESC) AS n FROM kiln_concurrency_declarations) t WHERE n = 1) d"
         " ON d.conc_key = c.conc_key SET c.max = d.max WHERE c.max <> d.max"),
)


def sweep(dead_after: float) -> Plan[list[str]]:
    lock, forget, *rest = SWEEP
    out = yield step(lock, Stmt(forget.sql, (micros(dead_after),)), *rest,
                     begin=True, last=True)
    return [str(r[0]) for r in out[2].rows]


def remove(key: str, actor: str) -> Plan[tuple[int | None, list[str]]]:
    """Remove a limit and its declarations, with its audit row, in one transaction:
    the max it had (None: there was none) and the servers that had declared it."""
    out = yield step(
        Stmt("SELECT max FROM kiln_concurrency_keys WHERE conc_key = %s FOR UPDATE", (key,)),
        Stmt("SELECT server_id FROM kiln_concurrency_declarations WHERE conc_key = %s"
             " ORDER BY server_id FOR UPDATE", (key,)),
        Stmt("DELETE FROM kiln_concurrency_keys WHERE conc_key = %s", (key,)),
        Stmt("DELETE FROM kiln_concurrency_declarations WHERE conc_key = %s", (key,)),
        begin=True,
    )
    found = int(out[0].rows[0][0]) if out[0].rows else None
    servers = [str(r[0]) for r in out[1].rows]
    detail = {"key": key, "max": found, "declared_by": servers}
    yield step(Stmt(f"INSERT INTO kiln_audit (at, actor, action, count, detail)"
                    f" VALUES ({NOW}, %s, %s, %s, %s)",
                    (actor, "concurrency_remove", int(found is not None), dumps(detail))),
               last=True)
    return found, servers


def declare_stmts(limits: Mapping[str, int]) -> tuple[Stmt, ...]:
    """The declaration of an insert's keys, their rows held until the commit (the
    pruner's race, PRUNE below): locked in share mode first (a row the pruner deleted
    meanwhile is not found), then only those whose row is missing or holds another max
    are written. A claim skips a key while an enqueue of it holds its row (FOR UPDATE
    SKIP LOCKED; MySQL has no lock mode that lets a claim and an enqueue share it)."""
    names = sorted(limits)
    if not names:
        return ()
    return (Stmt(
        f"SELECT conc_key FROM kiln_concurrency_keys WHERE conc_key IN ({marks(len(names))})"
        " ORDER BY conc_key LOCK IN SHARE MODE", names,
    ), Stmt(
        "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT * FROM (SELECT "
        + " UNION ALL SELECT ".join(["%s AS k, %s AS m"] * len(names))
        + ") AS u WHERE NOT EXISTS (SELECT 1 FROM kiln_concurrency_keys c"
        " WHERE c.conc_key = u.k AND c.max = u.m) ON DUPLICATE KEY UPDATE max = u.m",
        [x for k in names for x in (k, limits[k])],
    ))


def keys_back_stmt(keys: Mapping[str, str]) -> Stmt:
    """The rows of the keys of requeued jobs (key: kind), held until the commit, a
    missing one written again with the max of the kind's newest published declaration
    (1 without one): see the PostgreSQL requeue."""
    names = sorted(keys)
    return Stmt(
        "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT u.k, COALESCE((SELECT"
        " CAST(JSON_EXTRACT(d.options, '$.concurrency.max') AS SIGNED) FROM kiln_kinds d"
        " WHERE d.kind = u.kind ORDER BY d.published_at DESC LIMIT 1), 1) FROM (SELECT "
        + " UNION ALL SELECT ".join(["%s AS k, %s AS kind"] * len(names))
        + ") AS u ON DUPLICATE KEY UPDATE max = kiln_concurrency_keys.max",
        [x for k in names for x in (k, keys[k])],
    )


# Pruning the rows of keys no job uses (see the PostgreSQL plan of the same name for
# the race and how the locks close it): candidates locked FOR UPDATE SKIP LOCKED (a
# row an enqueue holds in share mode is skipped), then deleted by a statement whose
# read (READ COMMITTED) comes after the locks. kiln_jobs_conc (state, conc_key) and
# kiln_jobs_ending find a key's jobs in every state that needs the row.
def _unused(alias: str) -> str:
    return (
        f"NOT EXISTS (SELECT 1 FROM kiln_jobs j WHERE j.conc_key = {alias}.conc_key AND"
        " j.state IN ('awaiting', 'pending', 'scheduled', 'available', 'running'))"
        f" AND NOT EXISTS (SELECT 1 FROM kiln_jobs j WHERE j.attempt_running"
        f" AND j.state = 'cancelled' AND j.conc_key = {alias}.conc_key)"
    )


def keys_prune(idle_for: float, limit: int) -> Plan[int]:
    out = yield step(Stmt(
        "SELECT c.conc_key FROM kiln_concurrency_keys c WHERE c.conc_key NOT LIKE %s"
        f" AND c.last_claimed_at < {NOW} - INTERVAL %s MICROSECOND AND {_unused('c')}"
        " LIMIT %s FOR UPDATE SKIP LOCKED", ("queue:%", micros(idle_for), limit),
    ), begin=True)
    keys = [str(r[0]) for r in out[0].rows]
    if not keys:
        yield step(Stmt("DO 0"), last=True)
        return 0
    done = yield step(Stmt(
        f"DELETE FROM kiln_concurrency_keys WHERE conc_key IN ({marks(len(keys))})"
        f" AND {_unused('kiln_concurrency_keys')}", tuple(keys),
    ), last=True)
    return int(done[0].rowcount)


IN_USE = (
    "SELECT SUBSTRING_INDEX(conc_key, '|', 1) AS g, count(*) FROM kiln_jobs"
    " WHERE state = 'running' AND conc_key IS NOT NULL GROUP BY g"
    " UNION ALL SELECT c.conc_key, (SELECT count(*) FROM kiln_jobs j WHERE j.state = 'running'"
    " AND j.queue = SUBSTRING(c.conc_key, 7)) FROM kiln_concurrency_keys c"
    " WHERE c.conc_key LIKE 'queue:%%'"
)


def in_use() -> Plan[dict[str, int]]:
    out: dict[str, int] = {}
    for group, n in (yield one(IN_USE))[0].rows:
        key = group_of(str(group))
        out[key] = out.get(key, 0) + int(n)
    return out
