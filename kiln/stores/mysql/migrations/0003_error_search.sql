-- kiln schema, version 3 (MySQL/MariaDB): nothing to change; error search scans.
SELECT 1;
