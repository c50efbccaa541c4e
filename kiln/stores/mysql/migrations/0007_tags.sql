-- kiln schema, version 7 (MySQL/MariaDB).
-- tags: a JSON array of the job's tags, NULL when it has none (so plain jobs store
-- nothing). MariaDB has no index over the elements of a JSON array (MySQL 8's
-- multi-valued indexes have no MariaDB counterpart), so a tag, metadata or args filter
-- is checked on the rows the other conditions (state, queue, kind, id bounds) leave:
-- a listing newest first stops after a page of matches, a count or a bulk action reads
-- every such row. See docs/guide.md, "Tags and filters". The ALTER adds only the
-- columns that are missing (MySQL 8 has no ADD COLUMN IF NOT EXISTS), so the file can
-- run again after a crash.
-- One rebuild, not one per version (docs/adr/0018-mariadb-online-columns.md): MariaDB
-- adds no column instantly, nor in place with writes going on, to a table that has an
-- index on a virtual column (kiln_jobs_unique since version 4), so this ALTER also
-- adds the columns of the later versions up to 13 that are missing (version 4 added
-- them all, instantly, on a database that came through it with this file); their own
-- ALTERs then find them and do nothing. The server picks the algorithm: on MariaDB an
-- in-place rebuild during which writes to kiln_jobs wait (reads go on).
SET @kiln_m7 = (SELECT IF(COUNT(*) = 3, 'DO 0',
    CONCAT('ALTER TABLE kiln_jobs ', CONCAT_WS(', ',
        IF(SUM(column_name = 'tags'), NULL, 'ADD COLUMN tags JSON NULL'),
        IF(SUM(column_name = 'conc_key'), NULL, 'ADD COLUMN conc_key VARCHAR(255) NULL'),
        IF(SUM(column_name = 'defaulted'), NULL, 'ADD COLUMN defaulted INT NOT NULL DEFAULT 0'))))
    FROM information_schema.columns WHERE table_schema = DATABASE()
    AND table_name = 'kiln_jobs' AND column_name IN ('tags', 'conc_key', 'defaulted'));
PREPARE kiln_m7 FROM @kiln_m7;
EXECUTE kiln_m7;
DEALLOCATE PREPARE kiln_m7;
