-- kiln schema, version 18 (PostgreSQL).
-- The database connections each server's process holds, as its heartbeat last said
-- (its stores' pools, its LISTEN connection): `kiln servers`, the dashboard and the
-- metric kiln_server_connections show them. NULL: an older kiln, which does not say.
ALTER TABLE kiln_servers ADD COLUMN IF NOT EXISTS connections INTEGER;
