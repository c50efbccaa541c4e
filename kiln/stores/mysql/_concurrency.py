"""MySQL/MariaDB plans for global concurrency limits (kiln._concurrency): the limited
claim, the declaration of queue limits, and the running jobs by key group.

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

from kiln._concurrency import group_of, queue_group
from kiln._job import JobRow
from kiln.stores.mysql._jobs import JOB_COLS, NOW, UNPAUSED, row_to_job
from kiln.stores.mysql._plan import Plan, Stmt, marks, one, step

Candidate = tuple[int, int, int, datetime, int]  # rn, priority, key order, run_at, id


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
            " AND r.conc_key = c.conc_key) < c.max"
            " ORDER BY c.last_claimed_at, c.conc_key LIMIT %s FOR UPDATE SKIP LOCKED",
            (queue, *kinds, room),
        ),
    )


def _read_stmts(
    queue: str, kinds: list[str], room: int, keys: list[tuple[str, int]], queue_max: bool
) -> tuple[Stmt, ...]:
    """After the locks: the queue's running jobs, each key's running jobs and its first
    jobs (read without row locks: only the key's lock holder claims them, so only the
    rows taken are written), and the queue's plain jobs (locked, skipping locked ones)."""
    kind_in = f"kind IN ({marks(len(kinds))})"
    stmts = [Stmt(
        "SELECT count(*) FROM kiln_jobs WHERE state = 'running' AND queue = %s"
        if queue_max else "SELECT 0", (queue,) if queue_max else (),
    )]
    for key, most in keys:
        stmts.append(Stmt(
            "SELECT count(*) FROM kiln_jobs WHERE state = 'running' AND conc_key = %s", (key,)
        ))
        stmts.append(Stmt(
            "SELECT id, priority, run_at FROM kiln_jobs WHERE state = 'available'"
            f" AND conc_key = %s AND queue = %s AND {kind_in} AND {UNPAUSED}"
            " ORDER BY priority, run_at, id"
            " LIMIT %s", (key, queue, *kinds, min(most, room)),
        ))
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
    found: list[Candidate] = []
    for order, (_key, most) in enumerate(keys):
        free = most - int(out[1 + 2 * order].rows[0][0])
        rows = out[2 + 2 * order].rows[:max(free, 0)]
        found += [(rn, r[1], order, r[2], r[0]) for rn, r in enumerate(rows)]
    found += [(rn, r[1], -1, r[2], r[0]) for rn, r in enumerate(out[-1].rows)]
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
        Stmt(f"UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1,"
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


def declare(limits: Mapping[str, int]) -> Plan[None]:
    names = sorted(limits)  # one lock order for every caller
    if names:
        yield one(DECLARE.format(rows=", ".join(["(%s, %s)"] * len(names))),
                  *[x for k in names for x in (k, limits[k])])


def declare_stmts(limits: Mapping[str, int]) -> tuple[Stmt, ...]:
    """The declaration of an insert's keys: only those whose row is missing or holds
    another max are written, so an insert does not lock a row a claim is using."""
    names = sorted(limits)
    if not names:
        return ()
    return (Stmt(
        "INSERT INTO kiln_concurrency_keys (conc_key, max) SELECT * FROM (SELECT "
        + " UNION ALL SELECT ".join(["%s AS k, %s AS m"] * len(names))
        + ") AS u WHERE NOT EXISTS (SELECT 1 FROM kiln_concurrency_keys c"
        " WHERE c.conc_key = u.k AND c.max = u.m) ON DUPLICATE KEY UPDATE max = u.m",
        [x for k in names for x in (k, limits[k])],
    ),)


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
