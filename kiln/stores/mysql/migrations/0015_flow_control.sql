-- kiln schema, version 15 (MySQL/MariaDB): the jobs cancelled while running whose
-- handler has not ended hold their concurrency slots (see the PostgreSQL migration of
-- the same number). No partial indexes: attempt_running first, so the few such jobs are
-- one index range. Runs only when the index is missing, so the file can run again.
SET @kiln_m14 = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND index_name = 'kiln_jobs_ending') = 0,
    'ALTER TABLE kiln_jobs ADD KEY kiln_jobs_ending (attempt_running, state, conc_key, queue),'
    ' ALGORITHM=INPLACE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m14 FROM @kiln_m14;
EXECUTE kiln_m14;
DEALLOCATE PREPARE kiln_m14;
-- The admission of a key reads its first pending jobs in admission order (priority,
-- run_at, id) along this index, instead of sorting the key's whole backlog every round.
SET @kiln_m14 = IF((SELECT COUNT(*) FROM information_schema.statistics
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND index_name = 'kiln_jobs_pending_order') = 0,
    'ALTER TABLE kiln_jobs ADD KEY kiln_jobs_pending_order (state, rate_key, priority, run_at, id),'
    ' ALGORITHM=INPLACE, LOCK=NONE',
    'DO 0');
PREPARE kiln_m14 FROM @kiln_m14;
EXECUTE kiln_m14;
DEALLOCATE PREPARE kiln_m14;
