-- kiln schema, version 13 (PostgreSQL).
-- A queue's concurrency limit follows what live servers declare (docs/operating.md,
-- "What happens to jobs in flight when a declaration changes between deploys"):
-- kiln_concurrency_declarations holds one row per server that declared a limit
-- (app.queue_concurrency), written with the key's row when the server starts. A key
-- row "queue:NAME" that no live server declares any more (heartbeat within
-- dead_after) is removed (Store.concurrency_sweep), and its max follows the newest
-- live declaration. The rows of limits declared before this version get server_id ''
-- (declared by a server of an older kiln): they are kept until a server of this
-- version declares the limit, or an operator removes it (kiln queues limit --remove).
CREATE TABLE IF NOT EXISTS kiln_concurrency_declarations (
    conc_key TEXT NOT NULL,
    server_id TEXT NOT NULL,
    max INTEGER NOT NULL,
    declared_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (conc_key, server_id)
);
INSERT INTO kiln_concurrency_declarations (conc_key, server_id, max)
    SELECT conc_key, '', max FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%'
    ON CONFLICT DO NOTHING;
-- defaulted: the options a job was enqueued without, because its producer held no
-- declaration of its kind (kiln._model._adoption: a bit per option; 0 for every other
-- job). Once a server publishes the kind, those options follow its declaration and the
-- bits are cleared. kiln_jobs_undeclared holds only such jobs while they wait, so
-- finding them costs nothing while there are none, and nothing on an ordinary insert.
ALTER TABLE kiln_jobs ADD COLUMN IF NOT EXISTS defaulted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX kiln_jobs_undeclared ON kiln_jobs (kind, id) WHERE defaulted <> 0
    AND state IN ('awaiting', 'pending', 'scheduled', 'available');
