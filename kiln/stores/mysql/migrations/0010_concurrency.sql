-- kiln schema, version 10 (MySQL/MariaDB).
-- Global concurrency limits (kiln.Concurrency, docs/adr/0006-global-concurrency.md):
-- conc_key on limited jobs (NULL on the others), a row per key in
-- kiln_concurrency_keys, locked FOR UPDATE SKIP LOCKED by the claim of the key's jobs,
-- which then counts the key's running jobs (READ COMMITTED: a fresh read after the
-- lock). No partial indexes: kiln_jobs_claim gets conc_key after queue, so the plain
-- claim (conc_key IS NULL, a ref lookup) reads only plain jobs, and a key's available
-- and running jobs are one index range each (kiln_jobs_conc). Each ALTER runs only when
-- its change is missing, so the file can run again after a crash.
SET @kiln_m10 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'conc_key') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN conc_key VARCHAR(255) NULL',
    'DO 0');
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
