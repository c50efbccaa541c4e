-- kiln schema, version 13 (MySQL/MariaDB): the servers that declared a queue's
-- concurrency limit (see the PostgreSQL migration of the same number). IF NOT EXISTS
-- and INSERT IGNORE: the file can run again after a crash.
CREATE TABLE IF NOT EXISTS kiln_concurrency_declarations (
    conc_key VARCHAR(255) NOT NULL,
    server_id VARCHAR(255) NOT NULL,
    max INT NOT NULL,
    declared_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
    PRIMARY KEY (conc_key, server_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT IGNORE INTO kiln_concurrency_declarations (conc_key, server_id, max)
    SELECT conc_key, '', max FROM kiln_concurrency_keys WHERE conc_key LIKE 'queue:%';
-- defaulted: the options a job was enqueued without (see the PostgreSQL migration).
-- MySQL has no partial index: undeclared_kind, a virtual column, is the kind of such a
-- job while it waits and NULL otherwise, and kiln_jobs_undeclared indexes it (the NULLs
-- of every other job sort first, appended in id order). Each ALTER runs only when its
-- change is missing, so the file can run again after a crash.
-- defaulted is added here only on a database that did not come through version 4 with
-- its current file (which adds it instantly): MariaDB adds no column instantly, nor in
-- place with writes going on, to a table with an index on a virtual column
-- (kiln_jobs_unique), so the server rebuilds the table while writes wait
-- (docs/adr/0018-mariadb-online-columns.md).
SET @kiln_m13 = (SELECT IF(COUNT(*) = 1, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('defaulted'));
PREPARE kiln_m13 FROM @kiln_m13;
EXECUTE kiln_m13;
DEALLOCATE PREPARE kiln_m13;
SET @kiln_m13 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'undeclared_kind') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN undeclared_kind VARCHAR(255) AS (IF(defaulted <> 0
        AND state IN (''awaiting'', ''pending'', ''scheduled'', ''available''), kind, NULL))
        VIRTUAL, LOCK=NONE',
    'DO 0');
PREPARE kiln_m13 FROM @kiln_m13;
EXECUTE kiln_m13;
DEALLOCATE PREPARE kiln_m13;
-- its index by itself: MariaDB builds an index on a virtual column in place only alone
SET @kiln_m13 = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND index_name = 'kiln_jobs_undeclared') = 0,
    'ALTER TABLE kiln_jobs ADD KEY kiln_jobs_undeclared (undeclared_kind, id), ALGORITHM=INPLACE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m13 FROM @kiln_m13;
EXECUTE kiln_m13;
DEALLOCATE PREPARE kiln_m13;
