-- kiln schema, version 5 (MySQL/MariaDB).
-- attempt_running: the job was cancelled while running and the handler of that attempt
-- may still run (cancelling does not stop it). A requeue leaves such a job alone until
-- its server writes the attempt's (fenced-off) result, which clears the flag, or the
-- server is dead; otherwise the requeued job could run twice at once.
-- One rebuild, not one per version (docs/adr/0018-mariadb-online-columns.md): MariaDB
-- adds no column instantly, nor in place with writes going on, to a table that has an
-- index on a virtual column (kiln_jobs_unique since version 4), so this ALTER also
-- adds the columns of the later versions up to 13 that are missing (version 4 added
-- them all, instantly, on a database that came through it with this file); their own
-- ALTERs then find them and do nothing. The server picks the algorithm: on MariaDB an
-- in-place rebuild during which writes to kiln_jobs wait (reads go on).
SET @kiln_m5 = (SELECT IF(COUNT(*) = 5, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'attempt_running'), NULL, 'ADD COLUMN attempt_running BOOLEAN NOT NULL DEFAULT FALSE'),
        IF(SUM(column_name = 'result'), NULL, 'ADD COLUMN result JSON NULL'),
        IF(SUM(column_name = 'tags'), NULL, 'ADD COLUMN tags JSON NULL'),
        IF(SUM(column_name = 'conc_key'), NULL, 'ADD COLUMN conc_key VARCHAR(255) NULL'),
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('attempt_running', 'result', 'tags', 'conc_key', 'defaulted'));
PREPARE kiln_m5 FROM @kiln_m5;
EXECUTE kiln_m5;
DEALLOCATE PREPARE kiln_m5;
