-- kiln schema, version 4 (SQLite): kiln_kinds, the declarations servers publish of the
-- kinds they handle (see the PostgreSQL migration of the same number).
CREATE TABLE kiln_kinds (
    kind TEXT NOT NULL,
    server_id TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    options TEXT NOT NULL,
    digest TEXT NOT NULL,
    published_at REAL NOT NULL,
    PRIMARY KEY (kind, server_id)
);
