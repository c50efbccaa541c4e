-- kiln schema, version 12 (PostgreSQL).
-- The installation: one row whose id names this kiln database (this schema) wherever
-- kiln's telemetry goes. kilnotel exports it as the kiln_installation label of
-- kiln_build_info, and the monitoring mixin joins it onto every kiln series, so the
-- services that share one kiln database are one deployment in the alerts, and two
-- databases are two, whatever their scrape jobs are called. Made at random, once, by
-- the migration that creates the table (kiln migrate, app.migrate(), the printed
-- script); nothing changes it afterwards.
CREATE TABLE IF NOT EXISTS kiln_installation (
    id TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO kiln_installation (id)
SELECT substr(md5(random()::text || clock_timestamp()::text), 1, 16)
WHERE NOT EXISTS (SELECT 1 FROM kiln_installation);
