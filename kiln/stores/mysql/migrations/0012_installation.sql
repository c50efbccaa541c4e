-- kiln schema, version 12 (MySQL/MariaDB).
-- The installation: one row whose id names this kiln database wherever kiln's telemetry
-- goes (kiln_build_info's kiln_installation label, joined onto every kiln series by the
-- monitoring mixin: see the PostgreSQL migration of the same number). Made at random,
-- once; both statements can run again after an interruption (MariaDB's DDL does not roll
-- back).
CREATE TABLE IF NOT EXISTS kiln_installation (
    id VARCHAR(64) NOT NULL PRIMARY KEY,
    created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO kiln_installation (id)
SELECT LEFT(SHA2(CONCAT(UUID(), RAND()), 256), 16) FROM DUAL
WHERE NOT EXISTS (SELECT 1 FROM kiln_installation);
