-- kiln schema, version 15 (SQLite): the jobs cancelled while running whose handler has
-- not ended hold their concurrency slots (see the PostgreSQL migration of the same
-- number).
CREATE INDEX kiln_jobs_ending ON kiln_jobs (conc_key, queue)
    WHERE state = 'cancelled' AND attempt_running;
-- The admission of a key reads its first pending jobs in admission order along this
-- index, instead of sorting the key's whole backlog every round.
CREATE INDEX kiln_jobs_pending_order ON kiln_jobs (rate_key, priority, run_at, id)
    WHERE state = 'pending';
-- The rate-limited jobs that may still need their key's limit (not finished, pending
-- ones aside: kiln_jobs_pending_order has them), by key,
-- for the pruner of key rows.
CREATE INDEX kiln_jobs_rate_active ON kiln_jobs (rate_key)
    WHERE rate_key IS NOT NULL
    AND state IN ('awaiting', 'scheduled', 'available', 'running');
