-- kiln schema, version 6 (PostgreSQL).
-- result: what the handler of a completed job returned, as JSON (docs/guide.md,
-- "Stored results"). NULL when it returned None (the default, which costs nothing) or
-- the job has not completed; a requeue clears it. Bounded on the worker by
-- max_result_bytes before it is written. Read by job_get and by a dependent job's
-- job_dependency_results, never by claims or listings.
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS result JSONB NULL;
