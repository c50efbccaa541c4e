"""Contention with the user's own transaction: the harness and its checks.

A producer's transaction (the user's psycopg or pymysql connection, given to
``app.enqueue(..., conn=conn)``) takes a lock that kiln's writes need and keeps it
``HOLD`` seconds, longer than the database lets a statement wait for a lock
(``TIMEOUT``: PostgreSQL's statement_timeout on kiln's connections, set in their URL;
MariaDB's innodb_lock_wait_timeout, which kiln sets on its write connection and
``lock_wait`` lowers for the test's servers). Meanwhile one server runs and a producer
of kiln's own keeps enqueueing plain jobs and rate-limited ones, so that results,
heartbeats, admission and maintenance have work to do. What the lock is and what must
become of its jobs is a Hold (tests/deploys/holds.py).

The checks: the ledger's (tests/chaos/ledger.py), no fence, no result treated as
poison, no maintenance pass failed, no enqueue of kiln's own producer failed, and,
once the lock had been held past the timeout and until the producer committed, at
least one plain job's result written, one rate-limited job admitted and one heartbeat
confirmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import pytest

import kiln
from kiln import JobRow
from kiln.stores import Store
from tests.chaos.harness import all_rows
from tests.chaos.ledger import account
from tests.deploys.plan import Version
from tests.deploys.sequence import CONFIG as SEQUENCE_CONFIG
from tests.deploys.sequence import Fleet, settle
from tests.deploys.versions import Ledger, build_app
from tests.plugins.databases import mysql_connect
from tests.support.waits import wait_for

HOLD = 2.2  # seconds the producer's transaction keeps its lock
TIMEOUT = 1  # seconds a statement of kiln's may wait for a lock (whole: MariaDB's unit)
TICK = 0.2  # seconds between two enqueues of kiln's own producer
# the deploy tier's, with the leader's pruner and sweeper running every half second
CONFIG = dataclasses.replace(SEQUENCE_CONFIG, prune_interval=0.5)
Q = "q"
VERSION = Version("c", {
    "c.tick": {"queue": Q},
    "c.rated": {"queue": Q, "rate_limit": kiln.RateLimit(rate=10, per=0.5)},
    "c.parent": {"queue": Q},
    "c.child": {"queue": Q},
    "c.unique": {"queue": Q, "unique": kiln.Unique(by=("args.key",))},
    # sorts before c.rated, so its admission is tried first in each pass
    "c.held": {"queue": Q, "rate_limit": kiln.RateLimit(rate=1, per=0.5)},
}, {Q: 8})


def statement_timeout(url: str, seconds: float) -> str:
    """``url`` whose connections run with statement_timeout: theirs only."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query.get('options', '')} -cstatement_timeout={int(seconds * 1000)}"
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))


@contextlib.contextmanager
def lock_wait(monkeypatch: pytest.MonkeyPatch, seconds: int) -> Iterator[None]:
    """MariaDB: kiln's write connections of the stores opened inside wait ``seconds``
    for a row lock instead of kiln's 10 (kiln/stores/mysql/_kept.py), so that a test
    holds a lock past it in seconds."""
    from kiln.stores.mysql import _kept, _store

    session = _kept.SESSION.replace(f"= {_kept.LOCK_WAIT_TIMEOUT}", f"= {seconds}")
    assert session != _kept.SESSION, "kiln's MariaDB session settings changed: update me"
    with monkeypatch.context() as m:
        m.setattr(_kept, "SESSION", session)
        m.setattr(_store, "SESSION", session)
        yield


class Hold(Protocol):
    """One lock a producer's transaction holds, and what must become of its jobs."""

    name: str
    xfail: dict[str, str]  # backend -> "issue 39 item N: ..." while it fails on main

    async def prepare(self, bench: Bench) -> None:
        """Before the producer's transaction: the jobs the lock will be on."""

    def hold(self, bench: Bench, conn: Any) -> None:
        """In the producer's transaction (a thread of its own): take the lock."""

    async def during(self, bench: Bench) -> None:
        """While the lock is held: kiln's own action that needs it, if any."""

    def expect(self, bench: Bench) -> list[str]:
        """What must hold at the end, besides the common checks."""


class Bench:
    """One server, kiln's own producer, and the user's transaction, on one database."""

    def __init__(self, url: str, store: Store) -> None:
        self.backend = urlsplit(url).scheme
        self.user_url = url
        self.url = statement_timeout(url, TIMEOUT) if self.backend == "postgresql" else url
        self.store = store
        self.ledger = Ledger()
        self.app = build_app(self.url, VERSION, self.ledger)
        self.fleet = Fleet(store, self.ledger, CONFIG)
        self.ids: dict[str, list[int]] = {}  # what the Hold and the traffic enqueued
        self.unchecked: set[int] = set()  # jobs a Hold expects to end otherwise: it checks
        self.held_at = self.committed_at = 0.0
        self.rows: dict[int, JobRow] = {}
        self._stop = asyncio.Event()

    def note(self, what: str, job_id: int) -> None:
        self.ids.setdefault(what, []).append(int(job_id))

    def connect(self) -> Any:
        """The user's own connection, in a transaction."""
        if self.backend == "postgresql":
            import psycopg

            return psycopg.connect(self.user_url)
        return mysql_connect(self.user_url, autocommit=False)

    def _transaction(self, hold: Hold, held: threading.Event) -> None:
        conn = self.connect()
        try:
            hold.hold(self, conn)
            self.held_at = time.time()
            held.set()
            time.sleep(HOLD)  # the rest of the user's request: the scenario, not a wait
            conn.commit()
            self.committed_at = time.time()
        finally:
            conn.close()

    async def traffic(self) -> None:
        """kiln's own producer (other requests of the app): a plain job and a
        rate-limited one every TICK; an enqueue that fails is logged and counted."""
        while not self._stop.is_set():
            for kind in ("c.tick", "c.rated"):
                began = time.time()
                try:
                    self.note(kind, await self.app.aenqueue(kind, {"seconds": 0.05}))
                except kiln.KilnError as exc:
                    self.ledger("enqueue_failed", 0, kind=kind, began=began,
                                error=repr(exc)[:300])
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK)

    async def started(self, job_id: int) -> None:
        await wait_for(lambda: any(ln["ev"] == "start" and ln["job"] == job_id
                                   for ln in self.ledger.lines), 10, f"job {job_id} to start")

    async def play(self, hold: Hold) -> None:
        await self.fleet.start(self.app, VERSION)
        traffic = asyncio.create_task(self.traffic())
        try:
            await hold.prepare(self)
            held = threading.Event()
            producer = asyncio.create_task(asyncio.to_thread(self._transaction, hold, held))
            await wait_for(lambda: held.is_set() or producer.done(), 10, "the lock")
            await hold.during(self)
            await producer
        finally:
            self._stop.set()
            await traffic
        await settle(self.store)
        await self.fleet.stop(1)
        self.rows = await all_rows(self.store)
        for job_id in self.ids.get("c.parent", []):  # a listing leaves stored results out
            row = await self.store.job_get(job_id)
            if row is not None:
                self.rows[job_id] = row

    async def close(self) -> None:
        await self.fleet.close()
        await self.app.aclose()
        await asyncio.to_thread(self.app.close)

    def in_window(self, t: float) -> bool:
        """Whether ``t`` is after the lock was held past the timeout, before the commit."""
        return self.held_at + TIMEOUT + 0.2 <= t <= self.committed_at

    def violations(self, hold: Hold) -> list[str]:
        lines = self.ledger.lines
        checked = sorted({i for ids in self.ids.values() for i in ids} - self.unchecked)
        result = account(lines, self.rows, checked, float(CONFIG.dead_after))
        out = list(result["violations"])
        if result["overlaps"]:
            out.append(f"{result['overlaps']} executions overlapped the next of their job")
        out += [f"the server fenced itself: {ln['reason']}" for ln in lines
                if ln["ev"] == "fenced"]
        out += [f"job {ln['job']}: its {ln['outcome']} result was treated as poison: "
                f"{ln['error']}" for ln in lines if ln["ev"] == "poisoned"]
        out += [f"maintenance pass of {ln['service']} failed" for ln in lines
                if ln["ev"] == "maintenance" and ln["counts"].get("errors")]
        out += [f"kiln's own producer could not enqueue {ln['kind']} (began "
                f"+{ln['began'] - self.held_at:.2f}s into the hold): {ln['error']}"
                for ln in lines if ln["ev"] == "enqueue_failed"]
        out += self._went_on()
        return out + hold.expect(self)

    def _went_on(self) -> list[str]:
        """Results, admission and heartbeats while the lock was held past the timeout."""
        rows = self.rows.values()
        written = [r for r in rows if r.kind == "c.tick" and r.finished_at is not None
                   and self.in_window(r.finished_at.timestamp())]
        admitted = [r for r in rows if r.kind == "c.rated" and r.admitted_at is not None
                    and self.in_window(r.admitted_at.timestamp())]
        beats = [ln for ln in self.ledger.lines if ln["ev"] == "heartbeat" and ln["ok"]
                 and self.in_window(ln["t"])]
        missing = [what for what, seen in (("no result was written", written),
                                           ("no job was admitted", admitted),
                                           ("no heartbeat was confirmed", beats)) if not seen]
        if not missing:
            return []
        return [f"while the user's transaction held its lock past the timeout "
                f"(+{TIMEOUT + 0.2:g}s to +{self.committed_at - self.held_at:.2f}s): "
                + ", ".join(missing)]

