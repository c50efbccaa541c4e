-- kiln schema, version 6 (MySQL/MariaDB).
-- result: what the handler of a completed job returned, as JSON (docs/guide.md,
-- "Stored results"). NULL when it returned None (the default, which costs nothing) or
-- the job has not completed; a requeue clears it. Bounded on the worker by
-- max_result_bytes before it is written. Read by job_get and by a dependent job's
-- job_dependency_results, never by claims or listings.
-- One rebuild, not one per version (docs/adr/0018-mariadb-online-columns.md): MariaDB
-- adds no column instantly, nor in place with writes going on, to a table that has an
-- index on a virtual column (kiln_jobs_unique since version 4), so this ALTER also
-- adds the columns of the later versions up to 13 that are missing (version 4 added
-- them all, instantly, on a database that came through it with this file); their own
-- ALTERs then find them and do nothing. The server picks the algorithm: on MariaDB an
-- in-place rebuild during which writes to kiln_jobs wait (reads go on).
SET @kiln_m6 = (SELECT IF(COUNT(*) = 4, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'result'), NULL, 'ADD COLUMN result JSON NULL'),
        IF(SUM(column_name = 'tags'), NULL, 'ADD COLUMN tags JSON NULL'),
        IF(SUM(column_name = 'conc_key'), NULL, 'ADD COLUMN conc_key VARCHAR(255) NULL'),
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('result', 'tags', 'conc_key', 'defaulted'));
PREPARE kiln_m6 FROM @kiln_m6;
EXECUTE kiln_m6;
DEALLOCATE PREPARE kiln_m6;
