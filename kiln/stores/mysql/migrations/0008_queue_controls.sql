-- kiln schema, version 8 (MySQL/MariaDB).
-- Queue controls (docs/operating.md, "In an incident"): a row in kiln_queue_pauses
-- pauses its queue ("*": every queue), and claims skip a paused queue's jobs;
-- kiln_queue_limits holds concurrency set at runtime, for every server of a queue
-- (server_id '') or for one server.
CREATE TABLE IF NOT EXISTS kiln_queue_pauses (
    queue VARCHAR(255) NOT NULL PRIMARY KEY,
    paused_at DATETIME(6) NOT NULL,
    paused_by VARCHAR(255) NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS kiln_queue_limits (
    queue VARCHAR(255) NOT NULL,
    server_id VARCHAR(255) NOT NULL DEFAULT '',
    concurrency INT NOT NULL,
    set_at DATETIME(6) NOT NULL,
    set_by VARCHAR(255) NOT NULL,
    PRIMARY KEY (queue, server_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
