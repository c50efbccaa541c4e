-- kiln schema, version 10 (PostgreSQL).
-- Global concurrency limits (kiln.Concurrency, docs/adr/0006-global-concurrency.md).
-- conc_key: the key a limited job counts under ("kind:NAME" or "kind:NAME|VALUE"),
-- computed at enqueue; NULL for every other job. kiln_concurrency_keys holds one row
-- per key (and "queue:NAME" for a queue's limit): its max, and when a claim last took
-- one of its jobs (least recently served first: fairness across keys). The claim of a
-- limited job locks its key's row and counts the key's running jobs after the lock
-- (kiln_jobs_conc_running), so no two claims can both see a free slot.
-- kiln_jobs_claim now holds the plain available jobs only (conc_key IS NULL): the plain
-- claim reads none of the limited ones, however many wait ahead of it in the queue (an
-- index column (conc_key IS NULL) would do the same, but the planner costs it as a walk
-- of the whole queue and picks a sequential scan). kiln_jobs_conc_available holds the
-- limited ones, by key then queue. Counts of available jobs read both (_jobs.
-- AVAILABLE_PARTS). Rebuilding the index locks kiln_jobs against writes while it
-- builds (seconds per million available jobs).
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS conc_key TEXT;
CREATE TABLE IF NOT EXISTS kiln_concurrency_keys (
    conc_key TEXT PRIMARY KEY,
    max INTEGER NOT NULL CHECK (max >= 1),
    last_claimed_at TIMESTAMPTZ NOT NULL DEFAULT '-infinity'
);
DROP INDEX kiln_jobs_claim;
CREATE INDEX kiln_jobs_claim ON kiln_jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND conc_key IS NULL;
CREATE INDEX kiln_jobs_conc_available ON kiln_jobs (conc_key, queue, priority, run_at, id)
    WHERE state = 'available' AND conc_key IS NOT NULL;
CREATE INDEX kiln_jobs_conc_running ON kiln_jobs (conc_key)
    WHERE state = 'running' AND conc_key IS NOT NULL;
