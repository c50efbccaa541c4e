-- kiln schema, version 11 (mysql): nothing to do yet. PostgreSQL puts kind after queue
-- in its claim index and walks it once per kind (a LATERAL walk per kind, merged by
-- order); MariaDB has no LATERAL join, so its claim keeps one walk over the queue's
-- ready jobs, and a queue shared with another service's kinds still walks past them.
DO 0;
