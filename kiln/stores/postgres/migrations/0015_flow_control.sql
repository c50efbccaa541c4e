-- kiln schema, version 15 (PostgreSQL).
-- A job cancelled while running keeps its concurrency slot until its handler has ended
-- (attempt_running, version 5: cleared by the attempt's result, or by the rescuer once
-- its server is dead): the limited claims count these jobs with the running ones. They
-- are few and short-lived; this index finds them by key or queue without reading the
-- cancelled history.
CREATE INDEX kiln_jobs_ending ON kiln_jobs (conc_key, queue)
    WHERE state = 'cancelled' AND attempt_running;
-- The admission of a key reads its first pending jobs in the order they are admitted
-- (priority, run_at, id): along this index it reads only those, where
-- kiln_jobs_pending (rate_key, run_at, id) made it sort the key's whole backlog every
-- round (tests/flow/test_admission_cost.py).
CREATE INDEX kiln_jobs_pending_order ON kiln_jobs (rate_key, priority, run_at, id)
    WHERE state = 'pending';
-- The rate-limited jobs that may still need their key's limit (not finished, pending
-- ones aside: kiln_jobs_pending_order has them; with them here, the planner took this
-- index for admissions and sorted the backlog), by key:
-- the pruner of key rows (Store.rate_keys_prune) probes it once per idle key.
CREATE INDEX kiln_jobs_rate_active ON kiln_jobs (rate_key)
    WHERE rate_key IS NOT NULL
    AND state IN ('awaiting', 'scheduled', 'available', 'running');
