-- kiln schema, version 17 (PostgreSQL).
-- The rows of kiln_concurrency_keys that no job uses are pruned (Store.
-- concurrency_keys_prune, run by the leader's pruner): per-tenant keys come and go, and
-- every limited claim probes every row. The pruner keeps a key while any job may still
-- need its row: available (kiln_jobs_conc_available), running (kiln_jobs_conc_running),
-- cancelled but still ending (kiln_jobs_ending), or waiting to become available
-- (awaiting, pending, scheduled: this index).
CREATE INDEX kiln_jobs_conc_waiting ON kiln_jobs (conc_key)
    WHERE conc_key IS NOT NULL AND state IN ('awaiting', 'pending', 'scheduled');
