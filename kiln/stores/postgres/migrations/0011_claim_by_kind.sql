-- kiln schema, version 11 (PostgreSQL).
-- kiln_jobs_claim gets kind after queue, so that a claim reads only the kinds it
-- handles: a queue shared with another service's kinds no longer makes every claim
-- walk past that service's ready jobs (18 ms per 100,000 of them before this index,
-- bench/bench_foreign_claim.py). The claim walks the index once per kind it asks for
-- (_jobs.CLAIM, a LATERAL walk per kind, merged by priority, run_at, id), so its order
-- across kinds is the same as before. Same partial predicate as version 10: plain
-- available jobs only. Rebuilding the index locks kiln_jobs against writes while it
-- builds (seconds per million available jobs).
DROP INDEX kiln_jobs_claim;
CREATE INDEX kiln_jobs_claim ON kiln_jobs (queue, kind, priority, run_at, id)
    WHERE state = 'available' AND conc_key IS NULL;
