-- kiln schema, version 18 (MySQL/MariaDB).
-- The database connections each server's process holds, as its heartbeat last said
-- (see the PostgreSQL migration of the same number). NULL: an older kiln.
SET @kiln_m18 = IF((SELECT COUNT(*) FROM information_schema.columns
    WHERE table_schema = DATABASE() AND table_name = 'kiln_servers'
    AND column_name = 'connections') = 0,
    'ALTER TABLE kiln_servers ADD COLUMN connections INT NULL',
    'DO 0');
PREPARE kiln_m18 FROM @kiln_m18;
EXECUTE kiln_m18;
DEALLOCATE PREPARE kiln_m18;
