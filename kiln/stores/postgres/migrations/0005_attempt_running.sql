-- kiln schema, version 5 (PostgreSQL).
-- attempt_running: the job was cancelled while running and the handler of that attempt
-- may still run (cancelling does not stop it). A requeue leaves such a job alone until
-- its server writes the attempt's (fenced-off) result, which clears the flag, or the
-- server is dead; otherwise the requeued job could run twice at once.
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS attempt_running BOOLEAN NOT NULL DEFAULT false;
