-- kiln schema, version 9 (mysql): nothing to do. PostgreSQL adds a BRIN index over
-- created_at for time-range listings; mysql has no block-range index, and a B-tree over
-- created_at would cost every insert for a filter that mostly narrows others. A time
-- range alone scans by id here (see docs/dashboard.md, "With a million jobs").
DO 0;
