-- kiln schema, version 14 (MySQL/MariaDB): the unique index over unique_active in
-- descending order. InnoDB's duplicate check locks the key it finds and the gap before
-- it; ascending, the gap before the smallest key holds the NULLs of every job without
-- a key and the place the next such job is inserted (ids grow), so a caller's open
-- transaction that enqueued a duplicate of the smallest key made every plain insert
-- wait for its commit. Descending, the NULLs sort after every key and a new job's NULL
-- goes last, behind no key's gap. Needs MariaDB 10.8+ or MySQL 8 (older MariaDB reads
-- DESC and builds the index ascending, as before). One ALTER: the file can run again.
ALTER TABLE kiln_jobs DROP INDEX kiln_jobs_unique,
    ADD UNIQUE KEY kiln_jobs_unique (unique_active DESC),
    ALGORITHM=INPLACE, LOCK=NONE;
