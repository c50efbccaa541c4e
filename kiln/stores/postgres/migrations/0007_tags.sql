-- kiln schema, version 7 (PostgreSQL).
-- Tags, and filters on them and on metadata (JobFilter.tags, JobFilter.metadata).
-- Both indexes are partial: a job without tags (or without metadata) has no entry in
-- them, so enqueueing plain jobs maintains no more index entries than before. A
-- filter adds the indexes' predicates (tags <> '{}', metadata <> '{}') to its WHERE
-- so the planner may use them. Metadata holds the producer span's traceparent when
-- tracing is on: then every job has an entry in kiln_jobs_metadata (GIN, with its
-- pending list: an insert appends to it, VACUUM or a full list merges it).
-- ADD COLUMN with a constant default rewrites nothing. CREATE INDEX (not
-- CONCURRENTLY: migrations run in a transaction) blocks writes to kiln_jobs while it
-- builds: about 2 s per million jobs with metadata on a small machine.
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS tags TEXT[] NOT NULL DEFAULT '{}';
CREATE INDEX kiln_jobs_tags ON kiln_jobs USING gin (tags) WHERE tags <> '{}';
CREATE INDEX kiln_jobs_metadata ON kiln_jobs USING gin (metadata jsonb_path_ops)
    WHERE metadata <> '{}';
