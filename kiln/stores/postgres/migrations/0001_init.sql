-- kiln schema, version 1 (PostgreSQL). Times are timestamptz set from the database clock.
CREATE TABLE kiln_jobs (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN (
        'awaiting', 'pending', 'scheduled', 'available', 'running',
        'completed', 'failed', 'cancelled')),
    args JSONB NOT NULL,
    params JSONB NOT NULL DEFAULT '{}',
    metadata JSONB NOT NULL DEFAULT '{}',
    priority INTEGER NOT NULL DEFAULT 0,
    run_at TIMESTAMPTZ NOT NULL,
    attempt INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    timeout DOUBLE PRECISION,
    backoff JSONB,
    errors JSONB NOT NULL DEFAULT '[]',
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    admitted_at TIMESTAMPTZ,
    attempted_at TIMESTAMPTZ,
    finished_at TIMESTAMPTZ,
    server_id TEXT,
    rate_key TEXT,
    rescues INTEGER NOT NULL DEFAULT 0
);
-- Partial indexes cost nothing for rows outside their state, so an insert of available
-- jobs maintains only the primary key and kiln_jobs_claim (a third index costs a quarter
-- of enqueue throughput). Counts of available jobs come from kiln_jobs_claim.
CREATE INDEX kiln_jobs_claim ON kiln_jobs (queue, priority, run_at, id) WHERE state = 'available';
CREATE INDEX kiln_jobs_scheduled ON kiln_jobs (run_at) WHERE state = 'scheduled';
CREATE INDEX kiln_jobs_pending ON kiln_jobs (rate_key, run_at, id) WHERE state = 'pending';
CREATE INDEX kiln_jobs_admitted ON kiln_jobs (rate_key, admitted_at) WHERE admitted_at IS NOT NULL;
CREATE INDEX kiln_jobs_running ON kiln_jobs (server_id) WHERE state = 'running';
CREATE INDEX kiln_jobs_state_queue ON kiln_jobs (state, queue, id) WHERE state <> 'available';
CREATE INDEX kiln_jobs_finished ON kiln_jobs (state, finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE kiln_job_deps (
    job_id BIGINT NOT NULL,
    dep_id BIGINT NOT NULL,
    PRIMARY KEY (job_id, dep_id)
);
CREATE INDEX kiln_job_deps_dep ON kiln_job_deps (dep_id);

CREATE TABLE kiln_servers (
    id TEXT PRIMARY KEY,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    queues JSONB NOT NULL,
    kinds JSONB NOT NULL,
    version TEXT NOT NULL,
    started_at TIMESTAMPTZ NOT NULL,
    heartbeat_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE kiln_leader (
    name TEXT PRIMARY KEY,
    server_id TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE kiln_rate_limits (
    key TEXT PRIMARY KEY,
    rate INTEGER NOT NULL,
    per DOUBLE PRECISION NOT NULL,
    burst INTEGER NOT NULL,
    tokens DOUBLE PRECISION NOT NULL,
    updated_at TIMESTAMPTZ NOT NULL
);

CREATE TABLE kiln_cron (
    name TEXT PRIMARY KEY,
    last_slot TIMESTAMPTZ NOT NULL
);

CREATE TABLE kiln_audit (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at TIMESTAMPTZ NOT NULL DEFAULT now(),
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    count INTEGER NOT NULL,
    detail JSONB NOT NULL DEFAULT '{}'
);
