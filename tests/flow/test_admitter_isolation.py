"""One rate key never holds up another (issue 39 item 5), on every store.

A RateLimit that cannot be kept is refused where it is made (kiln.RateLimit: a whole
rate >= 1, a finite per > 0, a whole burst >= 0), so it is never declared, published or
stored. A stored limit this kiln cannot keep anyway (written by another program, or an
older kiln) fails its own key's admission only: the admitter warns once, counts it in
``failed``, and admits every other key in the same pass. A key whose row another
transaction holds is skipped (``busy``), never waited on (the contention tier's "rate
key" case, tests/deploys/test_contention.py, holds one past the lock timeout).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

import kiln
from kiln import NewJob, RateLimit, ServerConfig
from kiln._model._job import ServerInfo
from kiln._model._kinds import make_kind
from kiln._server._context import ServerContext
from kiln._server._identity import Identity
from kiln._server.maintenance.admitter import Admitter
from kiln.events import EventHub
from kiln.stores import Store
from tests.plugins.databases import mysql_connect


@pytest.mark.parametrize(("options", "option"), [
    ({"rate": 1, "per": math.inf}, "rate_limit.per"),
    ({"rate": 1, "per": math.nan}, "rate_limit.per"),
    ({"rate": 1, "per": 0}, "rate_limit.per"),
    ({"rate": 1, "per": -1.0}, "rate_limit.per"),
    ({"rate": 1, "per": True}, "rate_limit.per"),
    ({"rate": 1, "per": "1"}, "rate_limit.per"),
    ({"rate": 1.5}, "rate_limit.rate"),
    ({"rate": 1000.0}, "rate_limit.rate"),
    ({"rate": 0}, "rate_limit.rate"),
    ({"rate": True}, "rate_limit.rate"),
    ({"rate": 2, "burst": 2.7}, "rate_limit.burst"),
    ({"rate": 2, "burst": -1}, "rate_limit.burst"),
])
def test_a_rate_limit_that_cannot_be_kept_is_refused(options: dict[str, Any], option: str) -> None:
    with pytest.raises(kiln.ValidationError) as caught:
        RateLimit(**options)
    assert isinstance(caught.value, kiln.ConfigError)  # a kind's option as well
    assert caught.value.field == option
    assert option.split(".")[1] in str(caught.value) and "RateLimit(" in str(caught.value)


def test_good_rate_limits_are_kept_as_given() -> None:
    assert RateLimit(5, per=2).per == 2
    minute = RateLimit(5, per=timedelta(minutes=1), burst=3)  # type: ignore[arg-type]
    assert minute.per == 60.0
    assert RateLimit(1, per=0.001).rate == 1


def test_a_kind_with_a_bad_rate_limit_is_refused_at_declaration() -> None:
    app = kiln.App("sqlite:///:memory:")
    with pytest.raises(kiln.ConfigError, match=r"rate_limit\.per=inf"):
        @app.job("a.partner", rate_limit=RateLimit(1, per=float("inf")))
        async def partner(job: kiln.Job) -> None: ...

    assert "a.partner" not in app.kinds


def test_a_declaration_that_cannot_be_published_names_its_kind_and_option() -> None:
    # not reachable through RateLimit any more; the check stands for every option
    async def handler(job: kiln.Job) -> None: ...

    kind = make_kind("a.partner", handler, rate_limit=RateLimit(1))
    bad = object.__new__(RateLimit)
    for name, value in (("rate", 1), ("per", math.inf), ("burst", 0), ("key", None)):
        object.__setattr__(bad, name, value)
    broken = kind.__class__(**{**{f: getattr(kind, f) for f in kind.__slots__},
                               "rate_limit": bad})
    with pytest.raises(kiln.ConfigError, match=r"kind 'a.partner'.*rate_limit"):
        broken.declaration()


def _execute(url: str, sql: str, *params: Any) -> None:
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        with contextlib.closing(sqlite3.connect(parts.path)) as conn, conn:
            conn.execute(sql.replace("%s", "?"), params)
    elif parts.scheme.startswith("postgres"):
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute(sql, params)
    else:
        my = mysql_connect(url)
        with contextlib.closing(my), my.cursor() as cur:
            cur.execute(sql.replace("key", "`key`"), params)


async def _served(store: Store) -> None:
    """A live server serves the queues: the admitter admits only for such queues."""
    await store.server_register(ServerInfo(
        id="s-serving", host="h", pid=1, queues={"q1": 1, "q2": 1, "default": 1},
        kinds=[], version="test", started_at=datetime.now(UTC)))


async def _noop(job: object) -> None:
    return None


@pytest.mark.parametrize("damage", ["per = 0", "rate = 0", "burst = -1"])
async def test_a_stored_limit_that_cannot_be_kept_fails_its_own_key_only(
    store: Store, store_url: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    limit = RateLimit(rate=100, per=1, burst=5)
    kinds = {"z.good": make_kind("z.good", _noop, rate_limit=limit)}
    ctx = ServerContext(
        store=store, config=ServerConfig(poll_interval=0.5), events=EventHub(), kinds=kinds,
        identity=Identity.named("s1"), leader_since=lambda: None,
        wake=lambda released, _reason: None,
    )
    # "a.bad" sorts first: before the fix, its failure ended the pass before "z.good"
    await store.rate_limit_declare("a.bad", RateLimit(rate=1))
    _execute(store_url, f"UPDATE kiln_rate_limits SET {damage} WHERE key = %s", "a.bad")
    ids = await store.job_insert_many(
        [NewJob(kind="a.bad", args={}, rate_key="a.bad") for _ in range(2)]
        + [NewJob(kind="z.good", args={}, rate_key="z.good") for _ in range(3)]
    )
    await _served(store)
    admitter = Admitter(ctx)
    with caplog.at_level(logging.WARNING, logger="kiln.admitter"):
        counts = await admitter.run_once()
        again = await admitter.run_once()
    assert counts["admitted"] == 3 and counts["failed"] == 1, counts
    assert again.get("failed") == 1 and again["admitted"] == 0, again
    warned = [r.getMessage() for r in caplog.records if "a.bad" in r.getMessage()]
    assert len(warned) == 1, warned  # once, not every pass
    assert "other keys go on" in warned[0]
    rows = [await store.job_get(i) for i in ids]
    assert [r.state.value for r in rows if r is not None] == ["pending"] * 2 + ["available"] * 3
