-- kiln schema, version 4 (SQLite): kiln_kinds, the declarations servers publish of the
-- kinds they handle (see the PostgreSQL migration of the same number).
CREATE TABLE kiln_kinds (
    kind TEXT NOT NULL,
    server_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    options TEXT NOT NULL,
    digest TEXT NOT NULL,
    published_at REAL NOT NULL,
    PRIMARY KEY (kind, server_id)
);

-- Unique jobs: the key, the states that count, and a partial unique index over the
-- jobs whose state counts (see the PostgreSQL migration of the same number).
ALTER TABLE kiln_jobs ADD COLUMN unique_key TEXT;
ALTER TABLE kiln_jobs ADD COLUMN unique_states INTEGER NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX kiln_jobs_unique ON kiln_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND (unique_states & (CASE state WHEN 'awaiting' THEN 1
        WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4 WHEN 'available' THEN 8
        WHEN 'running' THEN 16 WHEN 'completed' THEN 32 WHEN 'failed' THEN 64
        ELSE 128 END)) <> 0;
