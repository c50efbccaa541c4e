-- kiln schema, version 3 (SQLite): nothing to change; error search scans.
SELECT 1;
