-- kiln schema, version 4 (MariaDB 10.6+ and MySQL 8): kiln_kinds, the declarations
-- servers publish of the kinds they handle (see the PostgreSQL migration of the same
-- number). IF NOT EXISTS: the file can simply run again after a crash.
CREATE TABLE IF NOT EXISTS kiln_kinds (
    kind VARCHAR(255) NOT NULL,
    server_id VARCHAR(255) NOT NULL,
    host VARCHAR(255) NOT NULL,
    pid INT NOT NULL,
    options JSON NOT NULL,
    digest VARCHAR(64) NOT NULL,
    published_at DATETIME(6) NOT NULL,
    PRIMARY KEY (kind, server_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

-- Unique jobs: the key and the states that count (see the PostgreSQL migration of the
-- same number). MySQL has no partial index: unique_active, a virtual column, is the key
-- while the job's state counts and NULL otherwise, and NULLs never collide in a unique
-- index. Each ALTER runs only when its column or index is missing (MySQL 8 has no ADD
-- COLUMN IF NOT EXISTS), so the file can run again after a crash.
SET @kiln_m4 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'unique_key') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN unique_key VARCHAR(64) NULL,
        ADD COLUMN unique_states INT NOT NULL DEFAULT 0, LOCK=NONE',
    'DO 0');
PREPARE kiln_m4 FROM @kiln_m4;
EXECUTE kiln_m4;
DEALLOCATE PREPARE kiln_m4;
SET @kiln_m4 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'unique_active') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN unique_active VARCHAR(64) AS (IF(unique_key IS NOT NULL
        AND (unique_states & (CASE state WHEN ''awaiting'' THEN 1 WHEN ''pending'' THEN 2
        WHEN ''scheduled'' THEN 4 WHEN ''available'' THEN 8 WHEN ''running'' THEN 16
        WHEN ''completed'' THEN 32 WHEN ''failed'' THEN 64 ELSE 128 END)) <> 0,
        unique_key, NULL)) VIRTUAL, LOCK=NONE',
    'DO 0');
PREPARE kiln_m4 FROM @kiln_m4;
EXECUTE kiln_m4;
DEALLOCATE PREPARE kiln_m4;
-- The stored columns of versions 5, 6, 7, 10 and 13, added here, instantly, while
-- kiln_jobs has no index on a virtual column yet: once kiln_jobs_unique exists
-- MariaDB can add a column only by rebuilding the table while writes wait
-- (docs/adr/0018-mariadb-online-columns.md). Same columns, same order as those
-- versions add them; their ALTERs then find them and do nothing. (Only a run of this
-- file resumed after an older kiln's was cut short finds kiln_jobs_unique already
-- there: then without the INSTANT clause, which would fail, the server rebuilds.)
SET @kiln_m4 = (SELECT IF(COUNT(*) = 5, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'attempt_running'), NULL, 'ADD COLUMN attempt_running BOOLEAN NOT NULL DEFAULT FALSE'),
        IF(SUM(column_name = 'result'), NULL, 'ADD COLUMN result JSON NULL'),
        IF(SUM(column_name = 'tags'), NULL, 'ADD COLUMN tags JSON NULL'),
        IF(SUM(column_name = 'conc_key'), NULL, 'ADD COLUMN conc_key VARCHAR(255) NULL'),
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'),
        IF((SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE()
            AND table_name = 'kiln_jobs' AND index_name = 'kiln_jobs_unique'), NULL,
            'ALGORITHM=INSTANT'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('attempt_running', 'result', 'tags', 'conc_key', 'defaulted'));
PREPARE kiln_m4 FROM @kiln_m4;
EXECUTE kiln_m4;
DEALLOCATE PREPARE kiln_m4;
-- its index by itself: MariaDB builds an index on a virtual column in place only alone
SET @kiln_m4 = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND index_name = 'kiln_jobs_unique') = 0,
    'ALTER TABLE kiln_jobs ADD UNIQUE KEY kiln_jobs_unique (unique_active), ALGORITHM=INPLACE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m4 FROM @kiln_m4;
EXECUTE kiln_m4;
DEALLOCATE PREPARE kiln_m4;
