"""What the shape of the unique key costs the database: statement variants, side by side.

Not a user benchmark (``bench_unique.py`` is: it goes through the public API); a
measurement of the schema alone, to decide whether a shorter key is worth a migration.
Each variant inserts batches of 1,000 new jobs into its own table, the variants
alternating batch by batch, and prints the median time of a batch and its ratio to the
plain insert's:

- PostgreSQL (tables with kiln_jobs' claim index and unique index predicate; the key
  column's type varies): ``plain`` (no key), ``text40`` (kiln's key: 40 hex
  characters, ``INSERT ... ON CONFLICT DO NOTHING``), ``bytea16`` (the digest's first
  16 bytes, the same statement), ``text22`` (those 16 bytes in base64, a key that
  SQL can convert the stored ones to), ``text40_no_conflict`` (a plain ``INSERT`` against the
  same unique index: what the arbiter's probe of ``ON CONFLICT`` adds), ``text40_hash``
  (kiln's key under an exclusion constraint on a hash index, ``EXCLUDE USING hash
  (unique_key WITH =)`` with the same predicate, in place of the unique B-tree; ``ON
  CONFLICT ON CONSTRAINT ... DO NOTHING``).
- SQLite (kiln's own schema, fresh files; one ``json_each`` run a batch, as the store
  inserts): ``plain``, ``text40``, ``text22``, ``blob16``.

    python bench/unique_key_shapes.py --store postgres --rounds 6
    python bench/unique_key_shapes.py --store sqlite --rounds 6 [--sqlite-autocheckpoint N]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kiln

BATCH = 1_000
COUNTED = (
    "unique_key IS NOT NULL AND (unique_states & (CASE state WHEN 'awaiting' THEN 1"
    " WHEN 'pending' THEN 2 WHEN 'scheduled' THEN 4 WHEN 'available' THEN 8"
    " WHEN 'running' THEN 16 WHEN 'completed' THEN 32 WHEN 'failed' THEN 64"
    " ELSE 128 END)) <> 0"
)
Batch = Callable[[list[str], list[bytes]], None]


def postgres(url: str) -> dict[str, Batch]:
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    shapes = {"plain": "text", "text40": "text", "text22": "text", "bytea16": "bytea",
              "text40_no_conflict": "text", "text40_hash": "text"}
    for name, key_type in shapes.items():
        table = f"kiln_shape_{name}"
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(
            f"CREATE TABLE {table} (id bigserial PRIMARY KEY, queue text NOT NULL,"
            " kind text NOT NULL, state text NOT NULL, args jsonb NOT NULL,"
            " priority int NOT NULL DEFAULT 0, run_at timestamptz NOT NULL DEFAULT now(),"
            f" unique_key {key_type}, unique_states int NOT NULL DEFAULT 0)"
        )
        conn.execute(f"CREATE INDEX ON {table} (queue, priority, run_at, id)"
                     " WHERE state = 'available'")
        if name == "text40_hash":
            conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_u EXCLUDE USING hash"
                         f" (unique_key WITH =) WHERE ({COUNTED})")
        else:
            conn.execute(f"CREATE UNIQUE INDEX {table}_u ON {table} (unique_key) WHERE {COUNTED}")

    def variant(name: str) -> Batch:
        table, key_type = f"kiln_shape_{name}", shapes[name]
        states = 0 if name == "plain" else 31
        conflict = "" if name in ("plain", "text40_no_conflict") else (
            f" ON CONFLICT ON CONSTRAINT {table}_u DO NOTHING" if name == "text40_hash"
            else f" ON CONFLICT (unique_key) WHERE {COUNTED} DO NOTHING")
        sql = (f"INSERT INTO {table} (queue, kind, state, args, unique_key, unique_states)"
               f" SELECT 'q', 'k', 'available', a::jsonb, k, {states}"
               f" FROM unnest(%s::text[], %s::{key_type}[]) AS u(a, k){conflict} RETURNING id")

        def run(args: list[str], digests: list[bytes]) -> None:
            keys: list[object]
            if name == "plain":
                keys = [None] * len(args)
            elif name == "bytea16":
                keys = [d[:16] for d in digests]
            elif name == "text22":
                keys = [base64.b64encode(d[:16]).decode()[:22] for d in digests]
            else:
                keys = [d.hex()[:40] for d in digests]
            assert len(conn.execute(sql, (args, keys), prepare=True).fetchall()) == len(args)

        return run

    return {name: variant(name) for name in shapes}


def sqlite(folder: str, autocheckpoint: int) -> dict[str, Batch]:
    widths = {"plain": 0, "text40": 40, "text22": 22, "blob16": 16}
    out: dict[str, Batch] = {}
    for name, width in widths.items():
        path = f"{folder}/{name}.db"
        app = kiln.App(f"sqlite:///{path}")
        asyncio.run(app.amigrate())
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA wal_autocheckpoint={int(autocheckpoint)}")
        key = "NULL" if not width else f"substr(?3, key * {width} + 1, {width})"
        if name.startswith("text"):
            key = f"CAST({key} AS TEXT)"
        sql = ("INSERT INTO kiln_jobs (queue, kind, state, metadata, priority, run_at,"
               " max_attempts, created_at, unique_states, args, unique_key)"
               f" SELECT 'q', 'k', 'available', '{{}}', 0, ?1, 25, ?1, {31 if width else 0},"
               f" value, {key} FROM json_each(?2) WHERE true ON CONFLICT DO NOTHING")

        def run(args: list[str], digests: list[bytes], conn: sqlite3.Connection = conn,
                name: str = name, sql: str = sql) -> None:
            if name == "text40":
                keys = "".join(d.hex()[:40] for d in digests).encode()
            elif name == "text22":
                keys = b"".join(base64.b64encode(d[:16])[:22] for d in digests)
            else:
                keys = b"".join(d[:16] for d in digests)
            params: tuple[object, ...] = (time.time(), json.dumps(args))
            conn.execute("BEGIN IMMEDIATE")
            assert conn.execute(sql, (*params, keys) if name != "plain" else params
                                ).rowcount == len(args)
            conn.execute("COMMIT")

        out[name] = run
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("postgres", "sqlite"), required=True)
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sqlite-autocheckpoint", type=int, default=1000,
                        help="WAL pages between checkpoints (SQLite's default, and kiln's: 1000)")
    parser.add_argument("--rounds", type=int, default=6, help="of 20 batches per variant")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        variants = postgres(opts.url) if opts.store == "postgres" else sqlite(
            folder, opts.sqlite_autocheckpoint)
        times: dict[str, list[float]] = {name: [] for name in variants}
        serial = 0
        for round_ in range(opts.rounds):
            for b in range(20):
                serial += 1
                args = [json.dumps({"n": f"{serial}-{i}"}) for i in range(BATCH)]
                digests = [hashlib.sha256(a.encode()).digest() for a in args]
                order = list(variants) if (round_ + b) % 2 else list(variants)[::-1]
                for name in order:
                    started = time.perf_counter()
                    variants[name](args, digests)
                    times[name].append(time.perf_counter() - started)
            print(json.dumps({"round": round_, "rows_per_table": serial * BATCH, "ms": {
                k: round(statistics.median(v[-20:]) * 1000, 2) for k, v in times.items()}}))
        medians = {k: statistics.median(v) for k, v in times.items()}
        print(json.dumps({"store": opts.store, "median_ms": {
            k: round(v * 1000, 2) for k, v in medians.items()}, "to_plain": {
            k: round(v / medians["plain"], 2) for k, v in medians.items()}}))
    if opts.store == "postgres":  # the tables were made beside kiln's: leave none behind
        import psycopg

        with psycopg.connect(opts.url, autocommit=True) as conn:
            for name in times:
                conn.execute(f"DROP TABLE IF EXISTS kiln_shape_{name}")


if __name__ == "__main__":
    main()
