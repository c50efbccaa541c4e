-- kiln schema, version 4 (PostgreSQL).
-- kiln_kinds: the declarations servers publish of the kinds they handle, one row per
-- kind and server, so that a producer without the handlers (the CLI, a web service
-- holding a bare Client) enqueues with the kind's queue, attempts and rate limit.
-- The newest row of a kind is its declaration; rows whose server is gone are deleted
-- when the kind is published again. Read only on a producer's cache miss.
CREATE TABLE IF NOT EXISTS kiln_kinds (
    kind TEXT NOT NULL,
    server_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    options JSONB NOT NULL,
    digest TEXT NOT NULL,
    published_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, server_id)
);

-- Unique jobs (kiln.Unique): unique_key is set at enqueue and kept through every state;
-- unique_states has a bit per state in which the job counts (awaiting 1, pending 2,
-- scheduled 4, available 8, running 16, completed 32, failed 64, cancelled 128). The
-- partial unique index holds only the jobs whose state counts, so a duplicate insert
-- conflicts (ON CONFLICT DO NOTHING) and a job that leaves those states frees its key
-- without any statement touching it. Plain jobs (no key) are not in the index.
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS unique_key TEXT;
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS unique_states INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX kiln_jobs_unique ON kiln_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states & (CASE state WHEN 'awaiting' THEN 1
        WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4 WHEN 'available' THEN 8
        WHEN 'running' THEN 16 WHEN 'completed' THEN 32 WHEN 'failed' THEN 64
        ELSE 128 END)) <> 0;
