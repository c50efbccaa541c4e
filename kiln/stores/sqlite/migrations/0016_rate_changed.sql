-- kiln schema, version 16 (SQLite).
-- When a key's limit last changed: the window is counted only within ``per`` of a
-- change (see the PostgreSQL migration of the same number). Older rows: changed now.
ALTER TABLE kiln_rate_limits ADD COLUMN changed_at REAL NOT NULL DEFAULT 0;
UPDATE kiln_rate_limits SET changed_at = CAST(strftime('%s', 'now') AS REAL);
