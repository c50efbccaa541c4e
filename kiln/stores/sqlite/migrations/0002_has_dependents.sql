-- kiln schema, version 2 (SQLite): the has_dependents column of version 2 everywhere.
-- The PostgreSQL store sets it when a dependent is inserted, so that completing a job
-- without dependents skips the release of dependents; this store does not read it
-- and leaves it 0.
ALTER TABLE kiln_jobs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;
