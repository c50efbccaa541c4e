-- kiln schema, version 18 (SQLite).
-- The database connections each server's process holds, as its heartbeat last said
-- (see the PostgreSQL migration of the same number). NULL: an older kiln.
ALTER TABLE kiln_servers ADD COLUMN connections INTEGER;
