"""PostgreSQL: the rate keys furthest behind (``Store.rate_keys_backlog``, kilnotel's
per-key gauges every ``counts_ttl``), at a cost that does not grow with the backlog.

Exact (``cap`` None): one ``GROUP BY`` over every due pending job, 1.3 to 1.5 s with
1,000,000 rate-limited jobs waiting (bench/RESULTS.md, "scale45"), every 5 s.

Capped: the keys with pending jobs are found by a loose index scan of kiln_jobs_pending
(one descent per key, as KEYS_PENDING in _rates), and each key's due jobs are counted
through that index up to ``cap + 1`` entries: exact up to the cap. The keys past it are
estimated from a sample of at most _counts.SAMPLE_PAGES pages of the table
(``TABLESAMPLE SYSTEM``, scaled by the share of pages read), never below ``cap + 1``.
A read thus costs at most (keys x (cap + 2)) index entries plus the sample, whatever
the backlog holds; the limits of the keys returned are read by their primary key.
"""

from __future__ import annotations

from kiln._model._job import RateLimit
from kiln.stores.postgres._counts import SAMPLE_PAGES
from kiln.stores.postgres._plan import Plan, one

EXACT = (
    "SELECT j.rate_key, count(*), r.rate, r.per, r.burst FROM kiln_jobs j"
    " LEFT JOIN kiln_rate_limits r ON r.key = j.rate_key WHERE j.state = 'pending'"
    " AND j.rate_key IS NOT NULL AND j.run_at <= now()"
    " GROUP BY j.rate_key, r.rate, r.per, r.burst ORDER BY count(*) DESC, j.rate_key LIMIT %s"
)
# each key with pending jobs and its due ones up to the cap (ordered as the index is,
# so the planner walks it), then the table's pages (key NULL) for the sample's share
CAPPED = (
    "WITH RECURSIVE k(key) AS ((SELECT rate_key FROM kiln_jobs WHERE state = 'pending'"
    " AND rate_key IS NOT NULL ORDER BY rate_key LIMIT 1) UNION ALL"
    " SELECT (SELECT j.rate_key FROM kiln_jobs j WHERE j.state = 'pending'"
    " AND j.rate_key > k.key ORDER BY j.rate_key LIMIT 1) FROM k WHERE k.key IS NOT NULL)"
    " SELECT k.key, (SELECT count(*) FROM (SELECT 1 FROM kiln_jobs j"
    " WHERE j.state = 'pending' AND j.rate_key = k.key AND j.run_at <= now()"
    " ORDER BY j.rate_key, j.run_at LIMIT %s) c) FROM k WHERE k.key IS NOT NULL"
    " UNION ALL SELECT NULL, greatest(pg_relation_size('kiln_jobs')"
    " / current_setting('block_size')::int, 1)"
)
SAMPLE = (
    "SELECT rate_key, count(*) FROM kiln_jobs TABLESAMPLE SYSTEM (%s::real) REPEATABLE (45)"
    " WHERE state = 'pending' AND run_at <= now() AND rate_key = ANY(%s::text[])"
    " GROUP BY rate_key"
)
LIMITS = "SELECT key, rate, per, burst FROM kiln_rate_limits WHERE key = ANY(%s::text[])"


def rate_keys_backlog(
    limit: int, cap: int | None = None
) -> Plan[list[tuple[str, RateLimit | None, int]]]:
    """Up to ``limit`` keys with the most due pending jobs, most first, then by key;
    with ``cap``, each counted exactly up to ``cap`` and estimated above (see above)."""
    if cap is None:
        rows = (yield one(EXACT, limit))[0]
        return [(r[0], None if r[2] is None else RateLimit(rate=r[2], per=r[3], burst=r[4]),
                 int(r[1])) for r in rows]
    counted = (yield one(CAPPED, cap + 1, prepare=True))[0]
    pages = max((int(r[1]) for r in counted if r[0] is None), default=1)
    counts = {str(r[0]): int(r[1]) for r in counted if r[0] is not None and int(r[1]) > 0}
    over = sorted(k for k, n in counts.items() if n > cap)
    if over:
        percent = min(100.0, 100.0 * SAMPLE_PAGES / pages)
        sampled = (yield one(SAMPLE, percent, over))[0]
        for key, n in sampled:
            counts[str(key)] = max(round(int(n) * 100.0 / percent), cap + 1)
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
    if not top:
        return []
    limits = {str(r[0]): RateLimit(rate=r[1], per=r[2], burst=r[3])
              for r in (yield one(LIMITS, [k for k, _ in top]))[0]}
    return [(k, limits.get(k), n) for k, n in top]
