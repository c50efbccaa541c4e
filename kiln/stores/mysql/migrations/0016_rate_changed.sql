-- kiln schema, version 16 (MySQL/MariaDB).
-- When a key's limit last changed: the window is counted only within ``per`` of a
-- change (see the PostgreSQL migration of the same number). Older rows: changed now.
SET @kiln_m16 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_rate_limits'
    AND column_name = 'changed_at') = 0,
    'ALTER TABLE kiln_rate_limits ADD COLUMN changed_at DATETIME(6) NOT NULL DEFAULT ''1970-01-01 00:00:00'', LOCK=NONE',
    'DO 0');
PREPARE kiln_m16 FROM @kiln_m16;
EXECUTE kiln_m16;
DEALLOCATE PREPARE kiln_m16;
UPDATE kiln_rate_limits SET changed_at = UTC_TIMESTAMP(6) WHERE changed_at < '1971-01-01';
