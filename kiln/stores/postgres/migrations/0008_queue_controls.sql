-- kiln schema, version 8 (PostgreSQL).
-- Queue controls (docs/operating.md, "In an incident"): a row in kiln_queue_pauses
-- pauses its queue ("*": every queue), and claims skip a paused queue's jobs;
-- kiln_queue_limits holds concurrency set at runtime, for every server of a queue
-- (server_id '') or for one server.
CREATE TABLE IF NOT EXISTS kiln_queue_pauses (
    queue TEXT PRIMARY KEY,
    paused_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    paused_by TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kiln_queue_limits (
    queue TEXT NOT NULL,
    server_id TEXT NOT NULL DEFAULT '',
    concurrency INTEGER NOT NULL,
    set_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    set_by TEXT NOT NULL,
    PRIMARY KEY (queue, server_id)
);
