"""The store-specific SQL of the ``backlog`` case (bench/scale_backlog.py): a database of
the benchmark's own on PostgreSQL, MariaDB or SQLite, the backlog written into it
directly (bench code writes SQL; the measurements go through the store and the public
API), the release's setup, the overdue sampler's count and the facts of the run.

PostgreSQL fills with ``generate_series``, MariaDB with its SEQUENCE engine
(``seq_1_to_N``), SQLite with a recursive CTE; then each gathers its statistics as it
would have them in production (PostgreSQL VACUUM ANALYZE, MariaDB ANALYZE TABLE,
SQLite ANALYZE).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from typing import Any

from bench.bench_drain import (
    drop_database,
    drop_mysql_database,
    fresh_database,
    fresh_mysql_database,
    my_execute,
    pg_execute,
)

KINDS = {"postgresql": "postgresql", "postgres": "postgresql", "mariadb": "mariadb",
         "mysql": "mariadb", "sqlite": "sqlite"}
# the rows one statement writes (a chunk is one transaction)
CHUNKS = {"postgresql": 1_000_000, "mariadb": 100_000, "sqlite": 250_000}
LEAD = 30  # seconds from the release's setup to the first job due
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"


class Target:
    """One database of the benchmark's own (``url``) and its dialect's SQL."""

    def __init__(self, kind: str, prefix: str, url: str | None = None) -> None:
        self.kind = KINDS[kind]
        self._tmp: str | None = None
        if url is not None:
            self.url = url
        elif self.kind == "postgresql":
            self.url = fresh_database(prefix)
        elif self.kind == "mariadb":
            self.url = fresh_mysql_database(prefix)
        else:
            self._tmp = tempfile.mkdtemp(prefix=f"{prefix}-")
            self.url = f"sqlite:///{self._tmp}/backlog.db"
        self.chunk = CHUNKS[self.kind]

    def execute(self, sql: str) -> list[tuple[Any, ...]]:
        if self.kind == "postgresql":
            return pg_execute(sql, self.url)
        if self.kind == "mariadb":
            return my_execute(sql, self.url)
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=60,
                               isolation_level=None)
        try:
            cur = conn.execute(sql)
            return list(cur.fetchall()) if cur.description else []
        finally:
            conn.close()

    def drop(self) -> None:
        if self.kind == "postgresql":
            drop_database(self.url)
        elif self.kind == "mariadb":
            drop_mysql_database(self.url)
        elif self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # the backlog ------------------------------------------------------------------
    def prepare(self) -> None:
        if self.kind == "postgresql":
            self.execute("ALTER TABLE kiln_jobs SET (autovacuum_enabled = on)")

    def insert_available(self, lo: int, hi: int, queues: int, kinds: int,
                         only_queue: int | None) -> None:
        """Jobs lo..hi, available since an hour ago, in queue ``q{g % queues}`` and
        kind ``k{g % kinds}`` (of queue ``only_queue`` only, when given)."""
        cols = "(queue, kind, state, args, params, metadata, errors, run_at, max_attempts," \
            " created_at)"
        if self.kind == "postgresql":
            where = "" if only_queue is None else f" WHERE g % {queues} = {only_queue}"
            self.execute(
                f"INSERT INTO kiln_jobs {cols} SELECT 'q' || (g % {queues}),"
                f" 'k' || (g % {kinds}), 'available',"
                " jsonb_build_object('n', g, 'tenant', g % 1000), '{}', '{}', '[]',"
                " now() - interval '1 hour', 3, now() - interval '1 hour'"
                f" FROM generate_series({lo}, {hi}) g{where}")
        elif self.kind == "mariadb":
            where = "" if only_queue is None else f" WHERE seq % {queues} = {only_queue}"
            self.execute(
                f"INSERT INTO kiln_jobs {cols} SELECT CONCAT('q', seq % {queues}),"
                f" CONCAT('k', seq % {kinds}), 'available',"
                " JSON_OBJECT('n', seq, 'tenant', seq % 1000), '{}', '{}', '[]',"
                " UTC_TIMESTAMP(6) - INTERVAL 1 HOUR, 3, UTC_TIMESTAMP(6) - INTERVAL 1 HOUR"
                f" FROM seq_{lo}_to_{hi}{where}")
        else:
            where = "" if only_queue is None else f" WHERE g % {queues} = {only_queue}"
            self.execute(
                f"WITH RECURSIVE s(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM s"
                f" WHERE g < {hi}) INSERT INTO kiln_jobs {cols} SELECT 'q' || (g % {queues}),"
                f" 'k' || (g % {kinds}), 'available',"
                " json_object('n', g, 'tenant', g % 1000), '{}', '{}', '[]',"
                f" {_SQLITE_NOW} - 3600, 3, {_SQLITE_NOW} - 3600 FROM s{where}")

    def insert_scheduled(self, lo: int, hi: int, total: int, queues: int, kinds: int) -> None:
        """Jobs lo..hi of ``total`` scheduled, spread over the day after 10 minutes."""
        cols = "(queue, kind, state, args, params, metadata, errors, run_at, max_attempts," \
            " created_at)"
        step = 86400.0 / max(total, 1)
        if self.kind == "postgresql":
            self.execute(
                f"INSERT INTO kiln_jobs {cols} SELECT 'q' || (g % {queues}),"
                f" 'k' || (g % {kinds}), 'scheduled',"
                " jsonb_build_object('n', g, 'tenant', g % 1000), '{}', '{}', '[]',"
                f" now() + interval '10 minutes' + g * {step} * interval '1 second', 3, now()"
                f" FROM generate_series({lo}, {hi}) g")
        elif self.kind == "mariadb":
            self.execute(
                f"INSERT INTO kiln_jobs {cols} SELECT CONCAT('q', seq % {queues}),"
                f" CONCAT('k', seq % {kinds}), 'scheduled',"
                " JSON_OBJECT('n', seq, 'tenant', seq % 1000), '{}', '{}', '[]',"
                " UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE"
                f" + INTERVAL ROUND(seq * {step} * 1000000) MICROSECOND, 3, UTC_TIMESTAMP(6)"
                f" FROM seq_{lo}_to_{hi}")
        else:
            self.execute(
                f"WITH RECURSIVE s(g) AS (SELECT {lo} UNION ALL SELECT g + 1 FROM s"
                f" WHERE g < {hi}) INSERT INTO kiln_jobs {cols} SELECT 'q' || (g % {queues}),"
                f" 'k' || (g % {kinds}), 'scheduled',"
                " json_object('n', g, 'tenant', g % 1000), '{}', '{}', '[]',"
                f" {_SQLITE_NOW} + 600 + g * {step}, 3, {_SQLITE_NOW} FROM s")

    def analyze(self, vacuum: bool = True) -> None:
        if self.kind == "postgresql":
            self.execute("VACUUM ANALYZE kiln_jobs" if vacuum else "ANALYZE kiln_jobs")
        elif self.kind == "mariadb":
            self.execute("ANALYZE TABLE kiln_jobs")
        else:
            self.execute("ANALYZE")

    def delete_jobs(self) -> None:
        self.execute("DELETE FROM kiln_jobs")

    # the release ------------------------------------------------------------------
    def make_due(self, due: int, window: float) -> None:
        """The ``due`` first scheduled jobs fall due over ``window`` s, from LEAD s on
        (the UPDATE and the statistics take seconds at millions of rows: with 5 s, on
        MariaDB, jobs were due before the releaser's first call)."""
        step = window / due
        rank = ("SELECT id, row_number() OVER (ORDER BY run_at) AS r FROM kiln_jobs"
                f" WHERE state = 'scheduled' ORDER BY run_at LIMIT {due}")
        if self.kind == "postgresql":
            self.execute(
                f"UPDATE kiln_jobs j SET run_at = now() + interval '{LEAD} seconds'"
                f" + s.r * {step} * interval '1 second' FROM ({rank}) s WHERE j.id = s.id")
        elif self.kind == "mariadb":
            self.execute(
                f"UPDATE kiln_jobs j JOIN ({rank}) s ON j.id = s.id SET j.run_at ="
                f" UTC_TIMESTAMP(6) + INTERVAL {LEAD} SECOND"
                f" + INTERVAL ROUND(s.r * {step} * 1000000) MICROSECOND")
        else:
            self.execute(
                f"UPDATE kiln_jobs SET run_at = {_SQLITE_NOW} + {LEAD} + s.r * {step}"
                f" FROM ({rank}) s WHERE kiln_jobs.id = s.id")
        self.analyze(vacuum=False)

    def overdue_sql(self) -> str:
        """Scheduled jobs more than a second past their run_at."""
        late = {"postgresql": "now() - interval '1 second'",
                "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 SECOND",
                "sqlite": f"{_SQLITE_NOW} - 1"}[self.kind]
        return f"SELECT count(*) FROM kiln_jobs WHERE state = 'scheduled' AND run_at < {late}"

    # the facts --------------------------------------------------------------------
    def facts(self) -> dict[str, Any]:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        out: dict[str, Any] = {"cores": os.cpu_count(), "memory_gb": round(mem / 2**30, 1),
                               "load_1m": round(os.getloadavg()[0], 1)}
        if self.kind == "postgresql":
            out["postgres"] = dict(self.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN ('shared_buffers',"
                " 'work_mem', 'effective_cache_size', 'autovacuum', 'max_connections',"
                " 'random_page_cost', 'server_version', 'maintenance_work_mem')"))
            row = self.execute(
                "SELECT pg_total_relation_size('kiln_jobs'), pg_indexes_size('kiln_jobs'),"
                " (SELECT reloptions FROM pg_class WHERE oid = 'kiln_jobs'::regclass)")[0]
            out.update(table_mb=round(row[0] / 1e6), indexes_mb=round(row[1] / 1e6),
                       reloptions=row[2])
        elif self.kind == "mariadb":
            out["mariadb"] = {str(k): str(v) for k, v in self.execute(
                "SELECT VARIABLE_NAME, VARIABLE_VALUE FROM information_schema.GLOBAL_VARIABLES"
                " WHERE VARIABLE_NAME IN ('VERSION', 'INNODB_BUFFER_POOL_SIZE',"
                " 'INNODB_FLUSH_LOG_AT_TRX_COMMIT', 'MAX_CONNECTIONS')")}
            row = self.execute(
                "SELECT data_length, index_length FROM information_schema.TABLES"
                " WHERE table_schema = DATABASE() AND table_name = 'kiln_jobs'")[0]
            out.update(table_mb=round((int(row[0]) + int(row[1])) / 1e6),
                       indexes_mb=round(int(row[1]) / 1e6))
        else:
            path = self.url.removeprefix("sqlite:///")
            out["sqlite"] = {"version": sqlite3.sqlite_version,
                             "journal_mode": self.execute("PRAGMA journal_mode")[0][0]}
            out["file_mb"] = round(sum(os.path.getsize(p) for p in (path, path + "-wal")
                                       if os.path.exists(p)) / 1e6)
        return out
