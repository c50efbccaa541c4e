-- kiln schema, version 4 (MariaDB 10.6+ and MySQL 8): kiln_kinds, the declarations
-- servers publish of the kinds they handle (see the PostgreSQL migration of the same
-- number). IF NOT EXISTS: the file can simply run again after a crash.
CREATE TABLE IF NOT EXISTS kiln_kinds (
    kind VARCHAR(255) NOT NULL,
    server_id VARCHAR(255) NOT NULL,
    host VARCHAR(255) NOT NULL,
    pid INT NOT NULL,
    options JSON NOT NULL,
    digest VARCHAR(64) NOT NULL,
    published_at DATETIME(6) NOT NULL,
    PRIMARY KEY (kind, server_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
