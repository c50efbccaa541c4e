-- kiln schema, version 10 (MySQL/MariaDB).
-- Global concurrency limits (kiln.Concurrency, docs/adr/0006-global-concurrency.md):
-- conc_key on limited jobs (NULL on the others), a row per key in
-- kiln_concurrency_keys, locked FOR UPDATE SKIP LOCKED by the claim of the key's jobs,
-- which then counts the key's running jobs (READ COMMITTED: a fresh read after the
-- lock). No partial indexes: kiln_jobs_claim gets conc_key after queue, so the plain
-- claim (conc_key IS NULL, a ref lookup) reads only plain jobs, and a key's available
-- and running jobs are one index range each (kiln_jobs_conc). Each ALTER runs only when
-- its change is missing, so the file can run again after a crash.
-- One rebuild, not one per version (docs/adr/0018-mariadb-online-columns.md): MariaDB
-- adds no column instantly, nor in place with writes going on, to a table that has an
-- index on a virtual column (kiln_jobs_unique since version 4), so this ALTER also
-- adds the columns of the later versions up to 13 that are missing (version 4 added
-- them all, instantly, on a database that came through it with this file); their own
-- ALTERs then find them and do nothing. The server picks the algorithm: on MariaDB an
-- in-place rebuild during which writes to kiln_jobs wait (reads go on).
SET @kiln_m10 = (SELECT IF(COUNT(*) = 2, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'conc_key'), NULL, 'ADD COLUMN conc_key VARCHAR(255) NULL'),
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('conc_key', 'defaulted'));
PREPARE kiln_m10 FROM @kiln_m10;
EXECUTE kiln_m10;
DEALLOCATE PREPARE kiln_m10;
SET @kiln_m10 = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND index_name = 'kiln_jobs_conc') = 0,
    'ALTER TABLE kiln_jobs DROP KEY kiln_jobs_claim,'
    ' ADD KEY kiln_jobs_claim (state, queue, conc_key, priority, run_at, id),'
    ' ADD KEY kiln_jobs_conc (state, conc_key, priority, run_at, id),'
    ' ALGORITHM=INPLACE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m10 FROM @kiln_m10;
EXECUTE kiln_m10;
DEALLOCATE PREPARE kiln_m10;
CREATE TABLE IF NOT EXISTS kiln_concurrency_keys (
    conc_key VARCHAR(255) NOT NULL PRIMARY KEY,
    max INT NOT NULL,
    last_claimed_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00'
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
