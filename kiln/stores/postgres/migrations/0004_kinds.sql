-- kiln schema, version 4 (PostgreSQL).
-- kiln_kinds: the declarations servers publish of the kinds they handle, one row per
-- kind and server, so that a producer without the handlers (the CLI, a web service
-- holding a bare Client) enqueues with the kind's queue, attempts and rate limit.
-- The newest row of a kind is its declaration; rows whose server is gone are deleted
-- when the kind is published again. Read only on a producer's cache miss.
CREATE TABLE kiln_kinds (
    kind TEXT NOT NULL,
    server_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    options JSONB NOT NULL,
    digest TEXT NOT NULL,
    published_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, server_id)
);
