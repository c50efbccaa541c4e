-- kiln schema, version 19 (PostgreSQL).
-- The timings rollup (kiln._model._rollup): finished jobs counted per minute and per
-- quarter hour, queue, kind, state, run-time and wait-time class, which the charts
-- read instead of the jobs; and its watermark, the end of what has been counted (NULL:
-- never rolled). Two new tables: nothing existing is locked or rewritten.
CREATE TABLE IF NOT EXISTS kiln_timings (
    width INTEGER NOT NULL,
    slot BIGINT NOT NULL,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    run_class SMALLINT NOT NULL,
    wait_class SMALLINT NOT NULL,
    jobs BIGINT NOT NULL,
    PRIMARY KEY (width, slot, queue, kind, state, run_class, wait_class)
);
CREATE TABLE IF NOT EXISTS kiln_timings_mark (
    name TEXT PRIMARY KEY,
    rolled_to BIGINT
);
INSERT INTO kiln_timings_mark (name, rolled_to) VALUES ('default', NULL)
    ON CONFLICT (name) DO NOTHING;
