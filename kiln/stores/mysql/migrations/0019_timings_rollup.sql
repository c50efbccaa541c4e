-- kiln schema, version 19 (MySQL/MariaDB).
-- The timings rollup and its watermark (see the PostgreSQL migration of the same
-- number). Two new tables, IF NOT EXISTS: a run cut short can run again.
CREATE TABLE IF NOT EXISTS kiln_timings (
    width INT NOT NULL,
    slot BIGINT NOT NULL,
    queue VARCHAR(255) NOT NULL,
    kind VARCHAR(255) NOT NULL,
    state VARCHAR(16) NOT NULL,
    run_class SMALLINT NOT NULL,
    wait_class SMALLINT NOT NULL,
    jobs BIGINT NOT NULL,
    PRIMARY KEY (width, slot, queue, kind, state, run_class, wait_class)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS kiln_timings_mark (
    name VARCHAR(32) NOT NULL PRIMARY KEY,
    rolled_to BIGINT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT IGNORE INTO kiln_timings_mark (name, rolled_to) VALUES ('default', NULL);
