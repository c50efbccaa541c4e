-- kiln schema, version 7 (SQLite).
-- tags: a JSON array of the job's tags, NULL when it has none. Filters on tags
-- (json_each) and on metadata / args keys (json_extract) use no index: they are checked
-- on the rows the other conditions (state, queue, kind, id bounds) leave. See
-- docs/guide.md, "Tags and filters".
ALTER TABLE kiln_jobs ADD COLUMN tags TEXT;
