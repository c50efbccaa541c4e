-- kiln schema, version 2 (PostgreSQL).
-- has_dependents: true once a job has had a dependent inserted. A completion of a job
-- without dependents then skips the release of dependents (a lock and a check: two
-- more statements and a transaction around every batch of results).
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS has_dependents BOOLEAN NOT NULL DEFAULT false;
UPDATE kiln_jobs SET has_dependents = true WHERE id IN (SELECT dep_id FROM kiln_job_deps);
-- Running jobs are few (the sum of the servers' concurrency): rescue finds them through
-- kiln_jobs_state_queue, and a claim maintains one index entry less.
DROP INDEX kiln_jobs_running;
