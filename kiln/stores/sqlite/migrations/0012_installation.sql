-- kiln schema, version 12 (SQLite).
-- The installation: one row whose id names this kiln database wherever kiln's telemetry
-- goes (kiln_build_info's kiln_installation label, joined onto every kiln series by the
-- monitoring mixin: see the PostgreSQL migration of the same number). Made at random,
-- once.
CREATE TABLE IF NOT EXISTS kiln_installation (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL DEFAULT ((julianday('now') - 2440587.5) * 86400.0)
);
INSERT INTO kiln_installation (id)
SELECT lower(hex(randomblob(8)))
WHERE NOT EXISTS (SELECT 1 FROM kiln_installation);
