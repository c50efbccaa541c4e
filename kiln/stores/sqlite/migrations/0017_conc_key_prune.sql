-- kiln schema, version 17 (SQLite).
-- The rows of kiln_concurrency_keys that no job uses are pruned (see the PostgreSQL
-- migration of the same number): the keys of the jobs waiting to become available
-- (awaiting, pending, scheduled), by key, for the pruner's probe.
CREATE INDEX kiln_jobs_conc_waiting ON kiln_jobs (conc_key)
    WHERE conc_key IS NOT NULL AND state IN ('awaiting', 'pending', 'scheduled');
