-- kiln schema, version 2 (MariaDB 10.6+ and MySQL 8): has_dependents, true once a job
-- has had a dependent inserted. A completion of a job without dependents then commits
-- in the round trip that writes it, without locking and checking dependents (see
-- kiln/stores/mysql/_jobs.py). MySQL 8 has no ADD COLUMN IF NOT EXISTS: the ALTER runs
-- only when the column is missing, so the file can simply run again after a crash.
SET @kiln_m2 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'has_dependents') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN has_dependents BOOLEAN NOT NULL DEFAULT FALSE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m2 FROM @kiln_m2;
EXECUTE kiln_m2;
DEALLOCATE PREPARE kiln_m2;
UPDATE kiln_jobs SET has_dependents = TRUE WHERE id IN (SELECT dep_id FROM kiln_job_deps);
