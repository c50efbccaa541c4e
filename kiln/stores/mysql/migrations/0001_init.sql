-- kiln schema, version 1 (MariaDB 10.6+ and MySQL 8). InnoDB, utf8mb4 with binary
-- collation (names compare exactly, as on the other stores). Times are DATETIME(6) in
-- UTC, always set from the database clock (UTC_TIMESTAMP(6)). MySQL has no partial
-- indexes: state leads each index instead. Indexes are declared inside CREATE TABLE
-- and every table is IF NOT EXISTS, so a migration cut short by a crash (MySQL DDL
-- commits at once) can simply run again.
CREATE TABLE IF NOT EXISTS kiln_jobs (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    queue VARCHAR(255) NOT NULL,
    kind VARCHAR(255) NOT NULL,
    state VARCHAR(16) NOT NULL,
    args JSON NOT NULL,
    params JSON NOT NULL,
    metadata JSON NOT NULL,
    priority INT NOT NULL DEFAULT 0,
    run_at DATETIME(6) NOT NULL,
    attempt INT NOT NULL DEFAULT 0,
    max_attempts INT NOT NULL,
    timeout DOUBLE NULL,
    backoff JSON NULL,
    errors JSON NOT NULL,
    created_at DATETIME(6) NOT NULL,
    admitted_at DATETIME(6) NULL,
    attempted_at DATETIME(6) NULL,
    finished_at DATETIME(6) NULL,
    server_id VARCHAR(255) NULL,
    rate_key VARCHAR(255) NULL,
    rescues INT NOT NULL DEFAULT 0,
    KEY kiln_jobs_claim (state, queue, priority, run_at, id),
    KEY kiln_jobs_due (state, run_at),
    KEY kiln_jobs_pending (state, rate_key, run_at, id),
    KEY kiln_jobs_admitted (rate_key, admitted_at),
    KEY kiln_jobs_running (state, server_id),
    KEY kiln_jobs_state_kind (state, kind, id),
    KEY kiln_jobs_finished (state, finished_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS kiln_job_deps (
    job_id BIGINT NOT NULL,
    dep_id BIGINT NOT NULL,
    PRIMARY KEY (job_id, dep_id),
    KEY kiln_job_deps_dep (dep_id)
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS kiln_servers (
    id VARCHAR(255) NOT NULL PRIMARY KEY,
    host VARCHAR(255) NOT NULL,
    pid INT NOT NULL,
    queues JSON NOT NULL,
    kinds JSON NOT NULL,
    version VARCHAR(64) NOT NULL,
    started_at DATETIME(6) NOT NULL,
    heartbeat_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS kiln_leader (
    name VARCHAR(64) NOT NULL PRIMARY KEY,
    server_id VARCHAR(255) NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS kiln_rate_limits (
    `key` VARCHAR(255) NOT NULL PRIMARY KEY,
    rate INT NOT NULL,
    per DOUBLE NOT NULL,
    burst INT NOT NULL,
    tokens DOUBLE NOT NULL,
    updated_at DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS kiln_cron (
    name VARCHAR(255) NOT NULL PRIMARY KEY,
    last_slot DATETIME(6) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;

CREATE TABLE IF NOT EXISTS kiln_audit (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    at DATETIME(6) NOT NULL,
    actor VARCHAR(255) NOT NULL,
    action VARCHAR(64) NOT NULL,
    count INT NOT NULL,
    detail JSON NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
