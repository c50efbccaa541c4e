"""SQLite operations for global concurrency limits (kiln._model._concurrency): the limited claim,
the declaration of queue limits (and their sweep and removal), and the running jobs by
key group.

SQLite has one writer: the limited claim runs inside the claim's BEGIN IMMEDIATE
transaction (``_ops.write``), so counting a key's running jobs and taking its jobs see
the same database and nothing else writes in between. The rule is PostgreSQL's: keys
least recently served first, at most ``max - running`` jobs of a key, the first job of
every key before the second of any. Owns these statements only.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Mapping

from kiln._model._concurrency import group_of, queue_group
from kiln._model._job import JobRow
from kiln.stores._rows import RAN_UNIQUE, dumps
from kiln.stores.sqlite._jobs import row_to_job

# A job cancelled while running whose handler has not ended (attempt_running) holds its
# slot as a running one does (kiln_jobs_ending, migration 15).
ENDING = "state = 'cancelled' AND attempt_running"


def _count_running(conn: sqlite3.Connection, where: str, value: str) -> int:
    """The jobs holding slots of the key or queue: running, or cancelled and still ending."""
    row = conn.execute(
        f"SELECT (SELECT count(*) FROM kiln_jobs WHERE state = 'running' AND {where} = ?)"
        f" + (SELECT count(*) FROM kiln_jobs WHERE {ENDING} AND {where} = ?)",
        (value, value),
    ).fetchone()
    return int(row[0])


def _holding(where: str) -> str:
    """The jobs holding slots of a key or queue (``where``, on alias r): running, or
    cancelled and still ending."""
    return (f"((SELECT count(*) FROM kiln_jobs r WHERE r.state = 'running' AND {where})"
            f" + (SELECT count(*) FROM kiln_jobs r WHERE r.{ENDING} AND {where}))")


_KINDS = "IN (SELECT value FROM json_each(:kinds))"
# The next job of a key's lane after the row w (in claim order: priority, run_at, id),
# one index probe along kiln_jobs_conc_available.
_NEXT = (
    "(SELECT x.id FROM kiln_jobs x WHERE x.conc_key = w.k AND x.state = 'available'"
    f"  AND x.queue = :queue AND x.kind {_KINDS}"
    "  AND (x.priority, x.run_at, x.id) > (w.priority, w.run_at, w.id)"
    "  ORDER BY x.priority, x.run_at, x.id LIMIT 1)"
)
_FIRST = (
    "(SELECT x.id FROM kiln_jobs x WHERE x.conc_key = l.k AND x.state = 'available'"
    f"  AND x.queue = :queue AND x.kind {_KINDS} ORDER BY x.priority, x.run_at, x.id LIMIT 1)"
)


def _claim_sql(with_keys: bool) -> str:
    """The limited claim as one statement (see ``claim``)."""
    keys = (
        " keys AS (SELECT conc_key AS k, free, row_number() OVER"
        "  (ORDER BY last_claimed_at, conc_key) AS ord FROM (SELECT c.conc_key,"
        f"  c.last_claimed_at, c.max - {_holding('r.conc_key = c.conc_key')} AS free"
        "  FROM kiln_concurrency_keys c WHERE EXISTS (SELECT 1 FROM kiln_jobs j"
        "  WHERE j.conc_key = c.conc_key AND j.state = 'available' AND j.queue = :queue"
        f"  AND j.kind {_KINDS}))"
        "  WHERE free > 0 ORDER BY last_claimed_at, conc_key LIMIT (SELECT n FROM room)),"
    ) if with_keys else " keys AS (SELECT NULL AS k, 0 AS free, 0 AS ord WHERE 0),"
    return (
        "WITH room AS (SELECT CASE WHEN EXISTS (SELECT 1 FROM kiln_queue_pauses"
        "  WHERE queue IN (:queue, '*')) THEN 0 ELSE coalesce((SELECT max(0, min(:n, q.max"
        f"  - {_holding('r.queue = :queue')})) FROM kiln_concurrency_keys q"
        "  WHERE q.conc_key = :qkey), :n) END AS n),"
        f"{keys}"
        " walk(rn, priority, ord, run_at, id, k, free) AS ("
        "  SELECT 0, j.priority, l.ord, j.run_at, j.id, l.k, l.free FROM keys l"
        f"  JOIN kiln_jobs j ON j.id = {_FIRST}"
        "  UNION ALL"
        "  SELECT p.rn, p.priority, 0, p.run_at, p.id, NULL, 0 FROM (SELECT row_number() OVER"
        "  (ORDER BY priority, run_at, id) - 1 AS rn, priority, run_at, id FROM (SELECT priority,"
        "  run_at, id FROM kiln_jobs WHERE state = 'available' AND queue = :queue"
        f"  AND kind {_KINDS} AND conc_key IS NULL ORDER BY priority, run_at, id"
        "  LIMIT (SELECT n FROM room))) AS p"
        "  UNION ALL"
        "  SELECT w.rn + 1, j.priority, w.ord, j.run_at, j.id, w.k, w.free FROM walk w"
        f"  JOIN kiln_jobs j ON j.id = {_NEXT} WHERE w.k IS NOT NULL AND w.rn + 1 < w.free"
        "  ORDER BY 1, 2, 3, 4, 5 LIMIT (SELECT n FROM room))"
        " UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, attempted_at = :now,"
        f" {RAN_UNIQUE},"
        " server_id = :server WHERE id IN (SELECT id FROM walk) RETURNING *"
    )


CLAIM_KEYS = _claim_sql(True)
CLAIM_QUEUE = _claim_sql(False)


def _room(conn: sqlite3.Connection, queue: str, limit: int) -> int:
    """How many jobs the queue may start: ``limit``, or less under the queue's own limit."""
    paused = conn.execute(
        "SELECT 1 FROM kiln_queue_pauses WHERE queue IN (?, '*')", (queue,)
    ).fetchone()
    if paused:
        return 0
    row = conn.execute(
        "SELECT max FROM kiln_concurrency_keys WHERE conc_key = ?", (queue_group(queue),)
    ).fetchone()
    if row is None:
        return limit
    return max(0, min(limit, int(row[0]) - _count_running(conn, "queue", queue)))


def _key_jobs(
    conn: sqlite3.Connection, key: str, queue: str, kinds: list[str], offset: int, limit: int
) -> list[sqlite3.Row]:
    """(id, priority, run_at) of a key's available jobs in the queue, in claim order."""
    if limit <= 0:
        return []
    return conn.execute(
        "SELECT id, priority, run_at FROM kiln_jobs WHERE conc_key = ? AND"
        f" state = 'available' AND queue = ? AND kind IN ({','.join('?' * len(kinds))})"
        " ORDER BY priority, run_at, id LIMIT ? OFFSET ?", [key, queue, *kinds, limit, offset],
    ).fetchall()


def _candidates(
    conn: sqlite3.Connection, queue: str, kinds: list[str], room: int, with_keys: bool
) -> list[tuple[int, int, int, float, int]]:
    """(rn, priority, ord, run_at, id) of the jobs the claim may take, limited (only
    ``with_keys``) and plain; sorted, their first ``room`` are the claim.

    That is the first ``room`` of reading ``room`` jobs of every key, read in two rounds
    as PostgreSQL's claim reads them (kiln.stores.postgres._concurrency, ``a`` and
    ``b``): of n keys, at most cap = ceil(room / n) of each first, which is the whole
    claim when the keys have that many; when they fall short by ``short``, the rest
    can only come from later rounds of keys that had more, so a second round reads at
    most ``short`` more of each, past its first cap. Reading ``room`` of every key
    built ten times the rows a claim of ten keys takes (bench/RESULTS.md, lease40)."""
    marks = ",".join("?" * len(kinds))
    # the one writer's transaction: the free slots read here are exact, no second count
    keys = [] if not with_keys else conn.execute(
        "SELECT conc_key, free FROM (SELECT c.conc_key, c.last_claimed_at, c.max - (SELECT"
        " count(*) FROM kiln_jobs r WHERE r.conc_key = c.conc_key AND r.state = 'running')"
        " - (SELECT count(*) FROM kiln_jobs r WHERE r.conc_key = c.conc_key"
        f" AND r.{ENDING})"
        " AS free FROM kiln_concurrency_keys c WHERE EXISTS (SELECT 1 FROM kiln_jobs j"
        " WHERE j.conc_key = c.conc_key AND j.state = 'available' AND j.queue = ?"
        f" AND j.kind IN ({marks}))) WHERE free > 0 ORDER BY last_claimed_at, conc_key LIMIT ?",
        [queue, *kinds, room],
    ).fetchall()
    cap = -(-room // max(len(keys), 1))
    found: list[tuple[int, int, int, float, int]] = []
    first: list[tuple[str, int, int]] = []  # key, free, jobs read in the first round
    for order, (key, free) in enumerate(keys):
        rows = _key_jobs(conn, key, queue, kinds, 0, min(int(free), cap))
        first.append((key, int(free), len(rows)))
        found += [(rn, r[1], order, r[2], r[0]) for rn, r in enumerate(rows)]
    plain = conn.execute(
        "SELECT id, priority, run_at FROM kiln_jobs WHERE state = 'available' AND queue = ?"
        f" AND kind IN ({marks}) AND conc_key IS NULL ORDER BY priority, run_at, id LIMIT ?",
        [queue, *kinds, room],
    ).fetchall()
    short = room - len(found) - min(len(plain), cap)
    found += [(rn, r[1], -1, r[2], r[0]) for rn, r in enumerate(plain)]
    if short > 0:
        for order, (key, free, read) in enumerate(first):
            if read == cap and free > cap:  # the key may have more
                rows = _key_jobs(conn, key, queue, kinds, cap, min(free - cap, short))
                found += [(cap + rn, r[1], order, r[2], r[0]) for rn, r in enumerate(rows)]
    return found


WALKED = 64  # the largest claim made in one statement (CLAIM_KEYS)


def claim(
    conn: sqlite3.Connection, queue: str, kinds: list[str], limit: int, server_id: str,
    keys: bool = True,
) -> list[JobRow]:
    """The limited claim; ``keys`` False: only the queue's limit counts, and jobs with a
    concurrency key are left alone (Store.job_claim).

    One statement, as the plain claim (bench/RESULTS.md, lease40: a claim of fifteen
    statements waited for the GIL after each, behind the event loop's thread, and took
    half again the plain claim's time in a drain). ``room``: nothing in a paused queue,
    at most ``max - running`` under the queue's own limit. ``keys``: the keys with an
    available job in the queue and a free slot, least recently served first, at most
    ``room`` of them, with their free slots counted in the one writer's transaction
    (exact: nothing else writes in between). ``walk``: each lane (a key, or the plain
    jobs) walked one job at a time along its index, the lanes' n-th jobs before any
    lane's n+1-th (the recursive queue is extracted in (rn, priority, ord, run_at, id)
    order and every row it adds is one round later than the row that added it), a
    key's walk stopping at its free slots; the recursion stops at ``room`` rows. The
    order is the one PostgreSQL's claim sorts by: the first job of every key before the
    second of any, then priority. A claim of more than WALKED jobs reads each key's
    jobs with a statement of its own (``_claim_statements``): the walk's probes cost
    about the square of the jobs it takes from one key."""
    if not kinds or limit <= 0:
        return []
    if limit > WALKED:
        return _claim_statements(conn, queue, kinds, limit, server_id, keys)
    now = time.time()
    rows = conn.execute(CLAIM_KEYS if keys else CLAIM_QUEUE, {
        "queue": queue, "kinds": json.dumps(kinds), "n": limit, "now": now,
        "server": server_id, "qkey": queue_group(queue),
    }).fetchall()
    served = sorted({row["conc_key"] for row in rows if row["conc_key"] is not None})
    if served:
        conn.execute(
            "UPDATE kiln_concurrency_keys SET last_claimed_at = ?"
            f" WHERE conc_key IN ({','.join('?' * len(served))})", [now, *served],
        )
    jobs = [row_to_job(row) for row in rows]
    jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
    return jobs


def _claim_statements(
    conn: sqlite3.Connection, queue: str, kinds: list[str], limit: int, server_id: str,
    keys: bool = True,
) -> list[JobRow]:
    """The limited claim of more than WALKED jobs, a statement per key: the walk of
    CLAIM_KEYS probes a key's index once per job and its probes do not seek past the
    equal (priority, run_at) before them, so a claim of 500 from one key took three
    times the plain claim (bench/RESULTS.md, lease40)."""
    room = _room(conn, queue, limit)
    if room <= 0:
        return []
    picked = sorted(_candidates(conn, queue, kinds, room, keys))[:room]
    if not picked:
        return []
    now = time.time()
    ids = [p[4] for p in picked]
    rows = conn.execute(
        "UPDATE kiln_jobs SET state = 'running', attempt = attempt + 1, attempted_at = ?,"
        f" {RAN_UNIQUE},"
        f" server_id = ? WHERE id IN ({','.join('?' * len(ids))}) RETURNING *",
        [now, server_id, *ids],
    ).fetchall()
    served = sorted({row["conc_key"] for row in rows if row["conc_key"] is not None})
    conn.executemany(
        "UPDATE kiln_concurrency_keys SET last_claimed_at = ? WHERE conc_key = ?",
        [(now, key) for key in served],
    )
    jobs = [row_to_job(row) for row in rows]
    jobs.sort(key=lambda j: (j.priority, j.run_at, j.id))
    return jobs


def declare(
    conn: sqlite3.Connection, limits: Mapping[str, int], server_id: str | None = None
) -> None:
    """Set the max of these keys; with ``server_id``, also record that this server
    declares them (queue limits, which follow their live declarations: ``sweep``)."""
    conn.executemany(
        "INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES (?, ?)"
        " ON CONFLICT (conc_key) DO UPDATE SET max = excluded.max WHERE max <> excluded.max",
        sorted(limits.items()),
    )
    if server_id is None:
        return
    now = time.time()
    for key, limit in sorted(limits.items()):  # an older kiln's declaration ('') gives way
        conn.execute("DELETE FROM kiln_concurrency_declarations WHERE conc_key = ?"
                     " AND server_id = ''", (key,))
        conn.execute(
            "INSERT INTO kiln_concurrency_declarations (conc_key, server_id, max, declared_at)"
            " VALUES (?, ?, ?, ?) ON CONFLICT (conc_key, server_id) DO UPDATE SET"
            " max = excluded.max, declared_at = excluded.declared_at",
            (key, server_id, limit, now),
        )


def sweep(conn: sqlite3.Connection, dead_after: float) -> list[str]:
    """Forget the declarations of servers no longer live (an older kiln's, '', stay);
    remove the queue limits none declares; give the others their newest declaration's
    max (see the PostgreSQL plan of the same name)."""
    conn.execute(
        "DELETE FROM kiln_concurrency_declarations AS d WHERE server_id <> '' AND NOT EXISTS"
        " (SELECT 1 FROM kiln_servers s WHERE s.id = d.server_id AND s.heartbeat_at >= ?)",
        (time.time() - dead_after,),
    )
    gone = [str(r[0]) for r in conn.execute(
        "DELETE FROM kiln_concurrency_keys AS c WHERE c.conc_key LIKE 'queue:%' AND NOT EXISTS"
        " (SELECT 1 FROM kiln_concurrency_declarations d WHERE d.conc_key = c.conc_key)"
        " RETURNING conc_key"
    ).fetchall()]
    conn.execute(
        "UPDATE kiln_concurrency_keys AS c SET max = d.max FROM (SELECT conc_key, max FROM"
        " (SELECT conc_key, max, ROW_NUMBER() OVER (PARTITION BY conc_key ORDER BY"
        " declared_at DESC, server_id DESC) AS n FROM kiln_concurrency_declarations)"
        " WHERE n = 1) AS d WHERE d.conc_key = c.conc_key AND c.max <> d.max"
    )
    return sorted(gone)


def remove(conn: sqlite3.Connection, key: str, actor: str) -> tuple[int | None, list[str]]:
    """Remove a limit and its declarations, with its audit row (one transaction: the
    caller's write): the max it had (None: there was none) and who had declared it."""
    row = conn.execute("DELETE FROM kiln_concurrency_keys WHERE conc_key = ? RETURNING max",
                       (key,)).fetchone()
    servers = sorted(str(r[0]) for r in conn.execute(
        "DELETE FROM kiln_concurrency_declarations WHERE conc_key = ? RETURNING server_id",
        (key,)).fetchall())
    found = None if row is None else int(row[0])
    conn.execute(
        "INSERT INTO kiln_audit (at, actor, action, count, detail) VALUES (?, ?, ?, ?, ?)",
        (time.time(), actor, "concurrency_remove", int(found is not None),
         dumps({"key": key, "max": found, "declared_by": servers})),
    )
    return found, servers


def in_use(conn: sqlite3.Connection) -> dict[str, int]:
    out: dict[str, int] = {}
    rows = conn.execute(  # by group: the part before the key's value
        "SELECT substr(conc_key, 1, instr(conc_key || '|', '|') - 1) AS g, count(*)"
        " FROM kiln_jobs WHERE state = 'running' AND conc_key IS NOT NULL GROUP BY g"
    ).fetchall()
    for key, n in rows:
        group = group_of(str(key))
        out[group] = out.get(group, 0) + int(n)
    for (key,) in conn.execute(
        "SELECT conc_key FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%'"
    ).fetchall():
        out[key] = _count_running(conn, "queue", key[len("queue:"):])
    return out


# The rows of keys no job uses are pruned (see the PostgreSQL plan of the same name):
# one writer, so the check and the delete see one database and no enqueue comes
# between them; an enqueue after it writes the row again.
UNUSED = (
    "NOT EXISTS (SELECT 1 FROM kiln_jobs j WHERE j.conc_key = c.conc_key"
    " AND j.state = 'available') AND NOT EXISTS (SELECT 1 FROM kiln_jobs j"
    " WHERE j.conc_key = c.conc_key AND j.state = 'running') AND NOT EXISTS (SELECT 1"
    " FROM kiln_jobs j WHERE j.conc_key = c.conc_key AND j.conc_key IS NOT NULL"
    " AND j.state IN ('awaiting', 'pending', 'scheduled')) AND NOT EXISTS (SELECT 1"
    " FROM kiln_jobs j WHERE j.conc_key = c.conc_key AND j.state = 'cancelled'"
    " AND j.attempt_running)"
)


def keys_prune(conn: sqlite3.Connection, idle_for: float, limit: int) -> int:
    cur = conn.execute(
        "DELETE FROM kiln_concurrency_keys WHERE conc_key IN (SELECT c.conc_key"
        " FROM kiln_concurrency_keys c WHERE c.conc_key NOT LIKE 'queue:%'"
        f" AND c.last_claimed_at < ? AND {UNUSED} LIMIT ?)",
        (time.time() - idle_for, limit),
    )
    return cur.rowcount


def keys_back(conn: sqlite3.Connection, keys: Mapping[str, str]) -> None:
    """The rows of the keys of requeued jobs (key: kind), a missing one written again
    with the max of the kind's newest published declaration (1 without one)."""
    conn.executemany(
        "INSERT INTO kiln_concurrency_keys (conc_key, max) VALUES (?, coalesce((SELECT"
        " CAST(json_extract(d.options, '$.concurrency.max') AS INTEGER) FROM kiln_kinds d"
        " WHERE d.kind = ? ORDER BY d.published_at DESC LIMIT 1), 1))"
        " ON CONFLICT (conc_key) DO NOTHING", sorted(keys.items()),
    )
