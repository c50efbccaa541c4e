-- kiln schema, version 9 (PostgreSQL).
-- A BRIN index over created_at, for listings filtered by the time jobs were enqueued
-- (the dashboard's since/until, JobFilter.created_after/created_before). Jobs are
-- appended in creation order, so a block range summary is as selective as a B-tree
-- here at a tiny fraction of its size and of its cost on every insert. Without it a
-- range that holds few jobs walks the whole id index (300 ms at 1,000,000 jobs).
-- A BRIN index summarises a block range once it is full, when autovacuum comes by
-- (autosummarize); until then a scan reads that range's pages, so the newest jobs,
-- the ones a range rarely excludes, cost a little more than the older ones.
CREATE INDEX kiln_jobs_created ON kiln_jobs USING brin (created_at)
    WITH (autosummarize = on);
