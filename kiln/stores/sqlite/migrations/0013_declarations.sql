-- kiln schema, version 13 (SQLite): the servers that declared a queue's concurrency
-- limit (see the PostgreSQL migration of the same number).
CREATE TABLE kiln_concurrency_declarations (
    conc_key TEXT NOT NULL,
    server_id TEXT NOT NULL,
    max INTEGER NOT NULL,
    declared_at REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (conc_key, server_id)
);
INSERT INTO kiln_concurrency_declarations (conc_key, server_id, max)
    SELECT conc_key, '', max FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%';
-- defaulted: the options a job was enqueued without (see the PostgreSQL migration).
ALTER TABLE kiln_jobs ADD COLUMN defaulted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX kiln_jobs_undeclared ON kiln_jobs (kind, id) WHERE defaulted <> 0
    AND state IN ('awaiting', 'pending', 'scheduled', 'available');
