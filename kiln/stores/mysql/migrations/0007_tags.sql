-- kiln schema, version 7 (MySQL/MariaDB).
-- tags: a JSON array of the job's tags, NULL when it has none (so plain jobs store
-- nothing). MariaDB has no index over the elements of a JSON array (MySQL 8's
-- multi-valued indexes have no MariaDB counterpart), so a tag, metadata or args filter
-- is checked on the rows the other conditions (state, queue, kind, id bounds) leave:
-- a listing newest first stops after a page of matches, a count or a bulk action reads
-- every such row. See docs/guide.md, "Tags and filters". The ALTER runs only when the
-- column is missing (MySQL 8 has no ADD COLUMN IF NOT EXISTS), so the file can run
-- again after a crash.
SET @kiln_m7 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'
    AND column_name = 'tags') = 0,
    'ALTER TABLE kiln_jobs ADD COLUMN tags JSON NULL',
    'DO 0');
PREPARE kiln_m7 FROM @kiln_m7;
EXECUTE kiln_m7;
DEALLOCATE PREPARE kiln_m7;
