-- kiln schema, version 17 (MySQL/MariaDB).
-- The rows of kiln_concurrency_keys that no job uses are pruned (see the PostgreSQL
-- migration of the same number). Nothing to add here: kiln_jobs_conc (state, conc_key,
-- ...) finds a key's jobs in any state already.
DO 0;
