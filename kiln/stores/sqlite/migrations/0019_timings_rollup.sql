-- kiln schema, version 19 (SQLite).
-- The timings rollup and its watermark (see the PostgreSQL migration of the same number).
CREATE TABLE IF NOT EXISTS kiln_timings (
    width INTEGER NOT NULL,
    slot INTEGER NOT NULL,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    run_class INTEGER NOT NULL,
    wait_class INTEGER NOT NULL,
    jobs INTEGER NOT NULL,
    PRIMARY KEY (width, slot, queue, kind, state, run_class, wait_class)
);
CREATE TABLE IF NOT EXISTS kiln_timings_mark (
    name TEXT PRIMARY KEY,
    rolled_to INTEGER
);
INSERT OR IGNORE INTO kiln_timings_mark (name, rolled_to) VALUES ('default', NULL);
