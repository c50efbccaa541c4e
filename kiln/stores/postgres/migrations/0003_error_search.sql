-- kiln schema, version 3 (PostgreSQL).
-- Error-text search (the dashboard's Failed tab) is a substring match over every
-- attempt's error and traceback. Without an index it reads the errors of every failed
-- job: about a second with 100,000 of them. A trigram index over the failed jobs'
-- errors answers it in milliseconds. It needs the pg_trgm extension (part of
-- PostgreSQL's contrib), installed once per database, in "public" when that schema
-- exists. Where the migrating role may not create it, the migration goes on without
-- the index and the search still works, by scanning.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
        IF EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'public') THEN
            CREATE EXTENSION pg_trgm SCHEMA public;
        ELSE
            CREATE EXTENSION pg_trgm;
        END IF;
    END IF;
EXCEPTION WHEN insufficient_privilege OR undefined_file OR feature_not_supported THEN
    RAISE NOTICE 'kiln: pg_trgm unavailable, error search will scan';
END
$$;
DO $$
DECLARE
    trgm_schema TEXT;
BEGIN
    SELECT n.nspname INTO trgm_schema FROM pg_extension e
        JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF trgm_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS kiln_jobs_failed_errors ON kiln_jobs'
            ' USING gin (lower(errors::text) %I.gin_trgm_ops) WHERE state = ''failed''',
            trgm_schema);
    END IF;
END
$$;
