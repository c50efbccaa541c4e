-- kiln schema, version 1 (SQLite). Timestamps are unix seconds (REAL).
CREATE TABLE kiln_jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL,
    args TEXT NOT NULL,
    params TEXT NOT NULL DEFAULT '{}',
    metadata TEXT NOT NULL DEFAULT '{}',
    priority INTEGER NOT NULL DEFAULT 0,
    run_at REAL NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    timeout REAL,
    backoff TEXT,
    errors TEXT NOT NULL DEFAULT '[]',
    created_at REAL NOT NULL,
    admitted_at REAL,
    attempted_at REAL,
    finished_at REAL,
    server_id TEXT,
    rate_key TEXT,
    rescues INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX kiln_jobs_claim ON kiln_jobs (queue, priority, run_at, id) WHERE state = 'available';
CREATE INDEX kiln_jobs_scheduled ON kiln_jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX kiln_jobs_pending ON kiln_jobs (rate_key, run_at, id) WHERE state = 'pending';
CREATE INDEX kiln_jobs_admitted ON kiln_jobs (rate_key, admitted_at) WHERE admitted_at IS NOT NULL;
CREATE INDEX kiln_jobs_running ON kiln_jobs (server_id) WHERE state = 'running';
CREATE INDEX kiln_jobs_state_queue ON kiln_jobs (state, queue, id);
CREATE INDEX kiln_jobs_state_kind ON kiln_jobs (state, kind, id);
CREATE INDEX kiln_jobs_finished ON kiln_jobs (state, finished_at);

CREATE TABLE kiln_job_deps (
    job_id INTEGER NOT NULL,
    dep_id INTEGER NOT NULL,
    PRIMARY KEY (job_id, dep_id)
);
CREATE INDEX kiln_job_deps_dep ON kiln_job_deps (dep_id);

CREATE TABLE kiln_servers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues TEXT NOT NULL,
    kinds TEXT NOT NULL,
    version TEXT NOT NULL,
    started_at REAL NOT NULL,
    heartbeat_at REAL NOT NULL
);

CREATE TABLE kiln_leader (
    name TEXT PRIMARY KEY,
    server_id TEXT NOT NULL,
    expires_at REAL NOT NULL
);

CREATE TABLE kiln_rate_limits (
    key TEXT PRIMARY KEY,
    rate INTEGER NOT NULL,
    per REAL NOT NULL,
    burst INTEGER NOT NULL,
    tokens REAL NOT NULL,
    updated_at REAL NOT NULL
);

CREATE TABLE kiln_cron (
    name TEXT PRIMARY KEY,
    last_slot REAL NOT NULL
);

CREATE TABLE kiln_audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    count INTEGER NOT NULL,
    detail TEXT NOT NULL DEFAULT '{}'
);
