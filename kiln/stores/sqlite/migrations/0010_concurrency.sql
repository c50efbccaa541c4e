-- kiln schema, version 10 (SQLite).
-- Global concurrency limits (kiln.Concurrency, docs/adr/0006-global-concurrency.md):
-- conc_key on limited jobs, a row per key in kiln_concurrency_keys. SQLite has one
-- writer: the claim counts a key's running jobs and takes its jobs inside the same
-- BEGIN IMMEDIATE transaction. The claim index covers plain jobs only.
ALTER TABLE kiln_jobs ADD COLUMN conc_key TEXT;
CREATE TABLE kiln_concurrency_keys (
    conc_key TEXT PRIMARY KEY,
    max INTEGER NOT NULL CHECK (max >= 1),
    last_claimed_at REAL NOT NULL DEFAULT 0
);
DROP INDEX kiln_jobs_claim;
CREATE INDEX kiln_jobs_claim ON kiln_jobs (queue, priority, run_at, id)
    WHERE state = 'available' AND conc_key IS NULL;
CREATE INDEX kiln_jobs_conc_available ON kiln_jobs (conc_key, priority, run_at, id)
    WHERE state = 'available' AND conc_key IS NOT NULL;
CREATE INDEX kiln_jobs_conc_running ON kiln_jobs (conc_key)
    WHERE state = 'running' AND conc_key IS NOT NULL;
