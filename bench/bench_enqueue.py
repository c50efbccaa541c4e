"""Enqueue throughput through the public API, kiln beside its peers, on one store.

Every system starts from the same Python data (a list of dicts, one job's args each)
and enqueues it the way its user writes it, timed with what that takes (building
the calls' arguments, encoding, the insert, the commit):

- kiln: ``app.enqueue(kind, args)`` and ``await app.aenqueue(kind, args)`` one job at
  a time, ``app.enqueue_many`` / ``await app.aenqueue_many`` with ``(kind, args)``
  tuples in batches of 100, 1,000 and 10,000; ``kiln_otel`` is the same with
  ``kilnotel.observe_app`` on (metrics, and a producer span per enqueue through an SDK
  TracerProvider whose batch processor drops every span);
- PostgreSQL: pgqueuer (``Queries.enqueue`` / ``SyncQueries.enqueue``, payloads
  ``json.dumps(args).encode()``) and procrastinate (``defer`` / ``defer_async``,
  ``batch_defer`` / ``batch_defer_async``), from their own virtualenv
  (``--peers-python``; ``bash bench/peers/setup.sh /tmp/kiln-peers``);
- SQLite: ``sqlite_executemany``, the limit the issue set: the same rows into kiln's own
  table (same schema, indexes and pragmas) with one plain ``executemany`` and a commit
  per batch (one ``execute`` and a commit per single job); ``sqlite_json_each``, what
  SQLite does with the statement kiln's batch insert uses, by hand: the same rows as
  one ``INSERT ... SELECT`` over ``json_each`` of the args texts and a commit per batch;
- MariaDB / MySQL: ``mysql_executemany``: the same rows with asyncmy's (kiln's
  driver's) plain ``executemany`` (which sends one multi-row INSERT) and a commit per
  batch, one ``execute`` and a commit per single job;
- ``--baseline DIR``: ``kiln_baseline``, kiln imported from another checkout (say
  main before a change), in the same run.

Each run of each system is a process of its own on a fresh database; the runs are
interleaved (round 1 of every system, then round 2, ...). Each operation gets a
warm-up first. Prints one JSON line per system, operation and batch size: the median
jobs/s and the median CPU of the producer process per job (user + system, in µs),
then the ratios kiln/peer taken per run (same round) and their median.

    python bench/bench_enqueue.py [--url postgresql://postgres@127.0.0.1:5432/test]
    python bench/bench_enqueue.py --url sqlite:///tmp/bench.db
    python bench/bench_enqueue.py --url mysql://root@127.0.0.1:3306/test
    python bench/bench_enqueue.py --producers
    python bench/bench_enqueue.py --stages --rounds 9
    python bench/bench_enqueue.py --systems kiln kiln_baseline pgqueuer --batches \
        --baseline DIR --rounds 6   # single enqueues only

``--stages`` times each step of ``await app.aenqueue_many`` of 1,000 jobs on PostgreSQL
on its own, per job: building and validating the jobs, the statement's columns, the
store's insert (send, execute, commit, ids), the server's execution of the insert
(EXPLAIN ANALYZE, with and without its NOTIFY part) and a commit.

``--producers`` measures instead what resolving a kind's declaration costs a producer
(docs/guide.md, "Kinds hold for every producer"): 2,000 single-job enqueues through
a ``kiln.Client`` that holds the kind's declaration, through one that resolves it from
the published declarations (cached), and straight into the store (no resolution at
all), in interleaved rounds, as ratios to the store.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import kiln
from kiln._model._job import NewJob
from kiln._model._kinds import make_kind

BATCHES = (100, 1_000, 10_000)
KIND = "bench.noop"


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


class Timer:
    """Wall time and this process's CPU time over a block, per job."""

    def __init__(self, op: str, batch: int, jobs: int) -> None:
        self.op, self.batch, self.jobs = op, batch, jobs

    def __enter__(self) -> Timer:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        print(json.dumps({"op": self.op, "batch": self.batch, "jobs_per_s": self.jobs / wall,
                          "cpu_us_per_job": cpu / self.jobs * 1e6}), flush=True)


# ------------------------------------------------------------------- kiln (a worker)
def _tracer_provider() -> Any:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    return provider


def kiln_worker(
    url: str, single: int, jobs: int, otel: bool, batches: tuple[int, ...] = BATCHES
) -> None:
    app = kiln.App(url)
    app.register(KIND, lambda job: None, queue="bench")
    app.migrate()
    if otel:
        import kilnotel

        meters, _registry = kilnotel.prometheus_provider()
        kilnotel.observe_app(app, meters, _tracer_provider())
    args = [{"n": i} for i in range(max(single, jobs))]
    for i in range(10):
        app.enqueue(KIND, {"n": -i})  # warm-up: connection, prepared statement
    with Timer("enqueue", 1, single):
        for a in args[:single]:
            app.enqueue(KIND, a)
    for size in batches:
        app.enqueue_many([(KIND, a) for a in args[:size]])  # warm-up of this size
        with Timer("enqueue_many", size, jobs):
            for chunk in chunks(args[:jobs], size):
                app.enqueue_many([(KIND, a) for a in chunk])

    async def async_ops() -> None:
        for i in range(10):
            await app.aenqueue(KIND, {"n": -i})
        with Timer("aenqueue", 1, single):
            for a in args[:single]:
                await app.aenqueue(KIND, a)
        for size in batches:
            await app.aenqueue_many([(KIND, a) for a in args[:size]])
            with Timer("aenqueue_many", size, jobs):
                for chunk in chunks(args[:jobs], size):
                    await app.aenqueue_many([(KIND, a) for a in chunk])
        await app.aclose()

    asyncio.run(async_ops())
    app.close()


# ---------------------------------------------- the SQLite limit: a plain executemany
SQLITE_INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, created_at, rate_key, unique_key, unique_states)"
    " VALUES (?, ?, 'available', ?, '{}', 0, ?, 25, NULL, NULL, ?, NULL, NULL, 0)"
)


SQLITE_JSON_EACH = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, created_at, rate_key, unique_key, unique_states)"
    " SELECT ?, ?, 'available', value, '{}', 0, ?, 25, NULL, NULL, ?, NULL, NULL, 0"
    " FROM json_each(?)"
)


def sqlite_worker(url: str, single: int, jobs: int, json_each: bool = False) -> None:
    from kiln.stores.sqlite._store import connect

    kiln.App(url).migrate()  # kiln's schema and indexes
    conn = connect(url.removeprefix("sqlite:///"))  # kiln's pragmas
    args = [{"n": i} for i in range(max(single, jobs))]

    def insert_one(a: dict[str, Any]) -> None:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(SQLITE_INSERT, ("bench", KIND, json.dumps(a), now, now))
        conn.execute("COMMIT")

    def insert_many(chunk: list[dict[str, Any]]) -> None:
        now = time.time()
        conn.execute("BEGIN IMMEDIATE")
        if json_each:  # one statement: the args texts as a JSON array of strings
            texts = json.dumps([json.dumps(a) for a in chunk])
            conn.execute(SQLITE_JSON_EACH, ("bench", KIND, now, now, texts))
        else:
            conn.executemany(SQLITE_INSERT,
                             [("bench", KIND, json.dumps(a), now, now) for a in chunk])
        conn.execute("COMMIT")

    for i in range(10):
        insert_one({"n": -i})
    with Timer("enqueue", 1, single):
        for a in args[:single]:
            insert_one(a)
    for size in BATCHES:
        insert_many(args[:size])
        with Timer("enqueue_many", size, jobs):
            for chunk in chunks(args[:jobs], size):
                insert_many(chunk)
    conn.close()


# ------------------------------------------ MariaDB / MySQL: a plain executemany
MYSQL_INSERT = (
    "INSERT INTO kiln_jobs (queue, kind, state, args, params, metadata, priority, run_at,"
    " max_attempts, timeout, backoff, errors, created_at, rate_key, tags) VALUES"
    " (%s, %s, 'available', %s, '{}', '{}', 0, UTC_TIMESTAMP(6), 25, NULL, NULL, '[]',"
    " UTC_TIMESTAMP(6), NULL, NULL)"
)


def mysql_worker(url: str, single: int, jobs: int) -> None:
    import asyncmy

    kiln.App(url).migrate()  # kiln's schema and indexes
    p = urlsplit(url)
    args = [{"n": i} for i in range(max(single, jobs))]

    async def run() -> None:
        conn = await asyncmy.connect(host=p.hostname, port=p.port or 3306,
                                     user=p.username or "root", password=p.password or "",
                                     database=p.path[1:], autocommit=False)
        async with conn.cursor() as cur:
            async def insert_one(a: dict[str, Any]) -> None:
                await cur.execute(MYSQL_INSERT, ("bench", KIND, json.dumps(a)))
                await conn.commit()

            async def insert_many(chunk: list[dict[str, Any]]) -> None:
                await cur.executemany(MYSQL_INSERT, [("bench", KIND, json.dumps(a)) for a in chunk])
                await conn.commit()

            for i in range(10):
                await insert_one({"n": -i})
            with Timer("enqueue", 1, single):
                for a in args[:single]:
                    await insert_one(a)
            for size in BATCHES:
                await insert_many(args[:size])
                with Timer("enqueue_many", size, jobs):
                    for chunk in chunks(args[:jobs], size):
                        await insert_many(chunk)
        conn.close()

    asyncio.run(run())


SINGLE = 2_000


async def bench_producers(url: str, rounds: int) -> dict[str, list[float]]:
    """Single enqueues per second: local declaration, published one, the bare store."""
    from kiln.stores.postgres import PostgresStore

    store = PostgresStore(url)
    await store.open()
    await store.migrate()
    kind = make_kind("bench.mail", lambda job: None, queue="mail", max_attempts=12)
    if hasattr(store, "kinds_publish"):  # absent before kinds were published
        await store.kinds_publish("bench", "bench", 0, [kind.declaration()])
    clients = {"local": kiln.Client(store, {kind.name: kind}), "published": kiln.Client(store)}
    raw = NewJob(kind=kind.name, args={}, queue="mail", max_attempts=12)
    calls = {
        "store": lambda: store.job_insert_many([raw]),
        **{name: (lambda c=c: c.enqueue(kind.name, {})) for name, c in clients.items()},
    }
    for call in calls.values():
        await call()  # warm-up: prepared statements, the published declarations' cache
    rates: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            started = time.perf_counter()
            for _i in range(SINGLE):
                await call()
            rates[name].append(SINGLE / (time.perf_counter() - started))
    rates.update(await resolution_cost(clients, kind.name))
    await store.close()
    return rates


async def resolution_cost(clients: dict[str, kiln.Client], kind: str) -> dict[str, list[float]]:
    """Microseconds per enqueue spent before the insert (resolve, validate, build): the
    part a round trip's noise hides above. Without a kiln_kinds read after warm-up."""
    out: dict[str, list[float]] = {}
    for name, client in clients.items():
        catalog = getattr(client, "catalog", None)  # absent before kinds were published
        started = time.perf_counter()
        for _ in range(50_000):
            if catalog is not None:
                await catalog.ensure((kind,))
            client.build(kind, {})
        out[f"{name}_build_us"] = [(time.perf_counter() - started) / 50_000 * 1e6]
    return out


def report_producers(rates: dict[str, list[float]]) -> None:
    costs = {name: round(rates.pop(name)[0], 2) for name in list(rates) if "_us" in name}
    print(json.dumps({"before_insert_us_per_enqueue": costs}))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    for name, median in medians.items():
        print(json.dumps({"producer": name, "enqueues_per_s": round(median), "calls": SINGLE,
                          "runs": [round(r) for r in rates[name]]}))
    print(json.dumps({"ratios": {f"{name}/store": round(m / medians["store"], 3)
                                 for name, m in medians.items() if name != "store"}}))


# ------------------------------------------------------------------------- the peers
# Run by --peers-python with: url, single, jobs, then the batch sizes. They print the
# same lines as Timer does (the snippet below is prepended to each).
TIMER = '''
import json, time
class Timer:
    def __init__(self, op, batch, jobs):
        self.op, self.batch, self.jobs = op, batch, jobs
    def __enter__(self):
        self.cpu, self.wall = time.process_time(), time.perf_counter()
    def __exit__(self, *exc):
        wall = time.perf_counter() - self.wall
        cpu = time.process_time() - self.cpu
        print(json.dumps({"op": self.op, "batch": self.batch, "jobs_per_s": self.jobs / wall,
                          "cpu_us_per_job": cpu / self.jobs * 1e6}), flush=True)
def chunks(items, size):
    for start in range(0, len(items), size):
        yield items[start:start + size]
'''

PGQUEUER = TIMER + '''
import asyncio, sys
import psycopg
from pgqueuer.db import PsycopgDriver, SyncPsycopgDriver
from pgqueuer.queries import Queries, SyncQueries

url, single, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batches = [int(b) for b in sys.argv[4:]]
args = [{"n": i} for i in range(max(single, jobs))]
K = "bench.noop"

def sync_ops():
    conn = psycopg.connect(url, autocommit=True)
    q = SyncQueries(SyncPsycopgDriver(conn))
    for i in range(10):
        q.enqueue(K, json.dumps({"n": -i}).encode(), 0)
    with Timer("enqueue", 1, single):
        for a in args[:single]:
            q.enqueue(K, json.dumps(a).encode(), 0)
    for size in batches:
        w = args[:size]  # the warm-up of this size (fewer when --jobs is smaller)
        q.enqueue([K] * len(w), [json.dumps(a).encode() for a in w], [0] * len(w))
        with Timer("enqueue_many", size, jobs):
            for c in chunks(args[:jobs], size):
                q.enqueue([K] * len(c), [json.dumps(a).encode() for a in c], [0] * len(c))
    conn.close()

async def async_ops():
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    q = Queries(PsycopgDriver(conn))
    for i in range(10):
        await q.enqueue(K, json.dumps({"n": -i}).encode(), 0)
    with Timer("aenqueue", 1, single):
        for a in args[:single]:
            await q.enqueue(K, json.dumps(a).encode(), 0)
    for size in batches:
        w = args[:size]
        await q.enqueue([K] * len(w), [json.dumps(a).encode() for a in w], [0] * len(w))
        with Timer("aenqueue_many", size, jobs):
            for c in chunks(args[:jobs], size):
                await q.enqueue([K] * len(c), [json.dumps(a).encode() for a in c], [0] * len(c))
    await conn.close()

async def install():
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await Queries(PsycopgDriver(conn)).install()
    await conn.close()

asyncio.run(install())
sync_ops()
asyncio.run(async_ops())
'''

PROCRASTINATE = TIMER + '''
import asyncio, sys
import procrastinate

url, single, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
batches = [int(b) for b in sys.argv[4:]]
args = [{"n": i} for i in range(max(single, jobs))]
app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

@app.task(name="bench.noop", queue="bench")
def noop(n: int) -> None: ...

def sync_ops():
    with app.open():
        for i in range(10):
            noop.defer(n=-i)
        with Timer("enqueue", 1, single):
            for a in args[:single]:
                noop.defer(**a)
        for size in batches:
            noop.batch_defer(*args[:size])
            with Timer("enqueue_many", size, jobs):
                for c in chunks(args[:jobs], size):
                    noop.batch_defer(*c)

async def async_ops():
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for i in range(10):
            await noop.defer_async(n=-i)
        with Timer("aenqueue", 1, single):
            for a in args[:single]:
                await noop.defer_async(**a)
        for size in batches:
            await noop.batch_defer_async(*args[:size])
            with Timer("aenqueue_many", size, jobs):
                for c in chunks(args[:jobs], size):
                    await noop.batch_defer_async(*c)

asyncio.run(async_ops())
sync_ops()
'''


# ---------------------------------------------------- where the time goes (PostgreSQL)
def stages(url: str, reps: int) -> None:
    """Per job, for batches of 1,000 through ``app.aenqueue_many``: each step timed on
    its own (medians of ``reps``), and the server's execution of the insert from
    EXPLAIN ANALYZE, with and without its NOTIFY part."""
    import psycopg

    from kiln._client._batch import build_all
    from kiln._model._build import check_names
    from kiln.stores.postgres import _insert

    app = kiln.App(url)
    app.register(KIND, lambda job: None, queue="bench")
    app.migrate()
    items = [(KIND, {"n": i}) for i in range(1_000)]
    us: dict[str, list[float]] = {}

    def clock(name: str, started: float) -> None:
        us.setdefault(name, []).append((time.perf_counter() - started) / len(items) * 1e6)

    async def run() -> None:
        client = app.client()
        await app.aenqueue_many(items)
        for _ in range(reps):
            started = time.perf_counter()
            await app.aenqueue_many(items)
            clock("whole aenqueue_many", started)
            started = time.perf_counter()
            jobs = build_all(client, items)
            clock("validate, resolve options, encode args (build_all)", started)
            started = time.perf_counter()
            check_names(jobs)
            clock("check names (once per kind and queue)", started)
            started = time.perf_counter()
            _insert.compact(_insert.insert_columns(jobs))
            clock("build the statement's columns", started)
            started = time.perf_counter()
            await client._store.job_insert_many(jobs)
            clock("store insert: columns, send, execute, commit, ids", started)
        await app.aclose()

    asyncio.run(run())
    jobs = build_all(app.sync_client(), items)
    params = _insert.compact(_insert.insert_columns(jobs))
    quiet = _insert.INSERT_FAST[:_insert.INSERT_FAST.index(", kiln_notify")] + " SELECT id FROM ins"
    with psycopg.connect(url, autocommit=True) as conn:
        for name, sql in (("server: execute the insert (EXPLAIN ANALYZE)", _insert.INSERT_FAST),
                          ("server: the same without its NOTIFY part", quiet)):
            for _ in range(reps):
                conn.execute("BEGIN")
                plan = conn.execute(f"EXPLAIN (ANALYZE, TIMING off) {sql}", params).fetchall()
                conn.execute("ROLLBACK")
                ms = float(plan[-1][0].split()[2])
                us.setdefault(name, []).append(ms * 1e3 / len(items))
        for _ in range(reps):
            conn.execute("BEGIN")
            conn.execute(_insert.INSERT_FAST, params)
            started = time.perf_counter()
            conn.execute("COMMIT")
            clock("commit (a round trip and the WAL flush)", started)
    app.close()
    for name, values in us.items():
        print(json.dumps({"stage": name, "us_per_job": round(statistics.median(values), 2),
                          "batch": len(items)}))


# ------------------------------------------------------------------------------ runs
def store_of(url: str) -> str:
    scheme = urlsplit(url).scheme.split("+")[0]
    return {"postgresql": "postgres", "postgres": "postgres", "sqlite": "sqlite",
            "mysql": "mysql", "mariadb": "mysql"}[scheme]


def fresh(url: str, name: str, tmp: Path) -> str:
    """A fresh, empty database ``name`` beside the one ``url`` names."""
    store = store_of(url)
    if store == "sqlite":
        path = tmp / f"{name}.db"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return f"sqlite:///{path}"
    if store == "postgres":
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    import pymysql

    p = urlsplit(url)
    conn = pymysql.connect(host=p.hostname, port=p.port or 3306, user=p.username or "root",
                           password=p.password or "", autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
            cur.execute(f"CREATE DATABASE {name}")
    finally:
        conn.close()
    return urlunsplit(p._replace(path=f"/{name}"))


def drop(url: str) -> None:
    store = store_of(url)
    if store == "postgres":
        import psycopg

        base = urlunsplit(urlsplit(url)._replace(path="/postgres"))
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {urlsplit(url).path[1:]} WITH (FORCE)")
    elif store == "mysql":
        import pymysql

        p = urlsplit(url)
        conn = pymysql.connect(host=p.hostname, port=p.port or 3306,
                               user=p.username or "root", password=p.password or "")
        try:
            with conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {p.path[1:]}")
        finally:
            conn.close()


SINGLE_N = 1_000
JOBS_N = 20_000
PEERS = {"pgqueuer": PGQUEUER, "procrastinate": PROCRASTINATE}


def systems(store: str, peers_python: str, baseline: str | None) -> list[str]:
    names = ["kiln", "kiln_otel", *(["kiln_baseline"] if baseline else [])]
    if store == "sqlite":
        names.extend(("sqlite_executemany", "sqlite_json_each"))
    if store == "mysql":
        names.append("mysql_executemany")
    if store == "postgres":
        if Path(peers_python).exists():
            names.extend(PEERS)
        else:
            print(json.dumps({"peers": f"skipped: {peers_python} not found"}), file=sys.stderr)
    return names


def command(
    name: str, url: str, peers_python: str, single: int, jobs: int,
    batches: tuple[int, ...] = BATCHES,
) -> list[str]:
    """The command line of one run of ``name`` on its fresh database ``url``."""
    if name in PEERS:
        return [peers_python, "-c", textwrap.dedent(PEERS[name]), url, str(single),
                str(jobs), *(str(b) for b in batches)]
    worker = {"sqlite_executemany": "sqlite", "mysql_executemany": "mysql",
              "kiln_baseline": "kiln"}.get(name, name)
    return [sys.executable, __file__, "--worker", worker, url, "--single", str(single),
            "--jobs", str(jobs), "--batches", *(str(b) for b in batches)]


Results = dict[tuple[str, int], list[dict[str, float]]]  # (op, batch) -> one per round


def run_one(
    cmd: list[str], baseline: str | None = None
) -> dict[tuple[str, int], dict[str, float]] | str:
    """Run one system's process; ``baseline``: import kiln from that checkout instead."""
    root = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": f"{baseline}:{root}" if baseline else root}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False,
                          env=env)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return lines[-1] if lines else f"exit {done.returncode}"
    out: dict[tuple[str, int], dict[str, float]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            row = json.loads(line)
            out[(row["op"], row["batch"])] = row
    return out


def main_runs(
    url: str, rounds: int, peers_python: str, single: int, jobs: int, baseline: str | None,
    only: list[str] | None = None, batches: tuple[int, ...] = BATCHES,
) -> None:
    store = store_of(url)
    names = [n for n in systems(store, peers_python, baseline) if not only or n in only]
    results: dict[str, Results] = {name: {} for name in names}
    errors: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _round in range(rounds):
            for name in names:
                if name in errors:
                    continue
                db = fresh(url, f"kiln_bench_enq_{name}", Path(tmp))
                try:
                    got = run_one(command(name, db, peers_python, single, jobs, batches),
                                  baseline if name == "kiln_baseline" else None)
                finally:
                    drop(db)
                if isinstance(got, str):
                    errors[name] = got
                    continue
                for key, row in got.items():
                    results[name].setdefault(key, []).append(row)
    report(store, results, errors)


def report(store: str, results: dict[str, Results], errors: dict[str, str]) -> None:
    for name, error in errors.items():
        print(json.dumps({"system": name, "store": store, "error": error}))
    for name, by_op in results.items():
        for (op, batch), runs in sorted(by_op.items()):
            print(json.dumps({
                "system": name, "store": store, "op": op, "batch": batch,
                "jobs_per_s": round(statistics.median(r["jobs_per_s"] for r in runs)),
                "cpu_us_per_job": round(statistics.median(r["cpu_us_per_job"] for r in runs), 1),
                "runs": [round(r["jobs_per_s"]) for r in runs],
            }))
    kiln_runs = results.get("kiln", {})
    for peer, by_op in results.items():
        if peer == "kiln" or not by_op:
            continue
        ratios = {}
        for key, runs in sorted(by_op.items()):
            ours = kiln_runs.get(key, [])
            per_run = [k["jobs_per_s"] / p["jobs_per_s"] for k, p in zip(ours, runs, strict=False)]
            if per_run:
                ratios[f"{key[0]}/{key[1]}"] = {"median": round(statistics.median(per_run), 2),
                                               "runs": [round(r, 2) for r in per_run]}
        print(json.dumps({"ratios": f"kiln/{peer}", "store": store, **ratios}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get(
        "KILN_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--single", type=int, default=SINGLE_N,
                        help="jobs enqueued one at a time, per operation and run")
    parser.add_argument("--jobs", type=int, default=JOBS_N,
                        help="jobs enqueued in batches, per batch size and run")
    parser.add_argument("--peers-python", default="/tmp/kiln-peers/bin/python")
    parser.add_argument("--producers", action="store_true",
                        help="measure the cost of resolving declarations instead")
    parser.add_argument("--baseline", metavar="DIR",
                        help="another kiln checkout (e.g. `git archive main`, unpacked),"
                        " measured in the same run as kiln_baseline")
    parser.add_argument("--stages", action="store_true",
                        help="PostgreSQL: time each step of aenqueue_many per job instead")
    parser.add_argument("--systems", nargs="+", metavar="NAME",
                        help="only these systems (kiln, kiln_otel, kiln_baseline, pgqueuer, ...)")
    parser.add_argument("--batches", type=int, nargs="*", default=list(BATCHES),
                        help="batch sizes (none: single enqueues only)")
    parser.add_argument("--worker", nargs=2, metavar=("SYSTEM", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    batches = tuple(args.batches)
    if args.worker:
        system, url = args.worker
        if system in ("sqlite", "sqlite_json_each"):
            sqlite_worker(url, args.single, args.jobs, json_each=system == "sqlite_json_each")
        elif system == "mysql":
            mysql_worker(url, args.single, args.jobs)
        else:
            kiln_worker(url, args.single, args.jobs, otel=system == "kiln_otel",
                        batches=batches)
        return
    if args.stages:
        db = fresh(args.url, "kiln_bench_stages", Path(tempfile.gettempdir()))
        try:
            stages(db, max(args.rounds, 5))
        finally:
            drop(db)
        return
    if args.producers:
        url = fresh(args.url, "kiln_bench_producers", Path(tempfile.gettempdir()))
        report_producers(asyncio.run(bench_producers(url, args.rounds)))
        return
    main_runs(args.url, args.rounds, args.peers_python, args.single, args.jobs, args.baseline,
              args.systems, batches)


if __name__ == "__main__":
    main()
