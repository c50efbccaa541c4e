"""The contention tier: the user's own transaction holds a lock kiln's writes need,
past the database's lock timeout, while a server works (tests/deploys/contention.py,
tests/deploys/holds.py), on PostgreSQL and MariaDB.

SQLite has one writer: a user's open write transaction holds every write of kiln's,
heartbeats included, whatever lock it took, so there is no row lock to contend for
and nothing else to test there. A Hold that fails on today's main is a strict xfail
naming its issue item.
"""

from __future__ import annotations

import pytest

from tests.deploys.contention import TIMEOUT, Bench, lock_wait
from tests.deploys.holds import HOLDS, Dependency, RateKey, Requeue, UniqueDuplicate
from tests.integration.inprocess import open_store

pytestmark = pytest.mark.contention


@pytest.mark.parametrize("hold_type", HOLDS, ids=[h.name.replace(" ", "-") for h in HOLDS])
async def test_the_users_lock_held_past_the_timeout_loses_and_fences_nothing(
    hold_type: type[Dependency | UniqueDuplicate | Requeue | RateKey], store_url: str,
    backend: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
) -> None:
    if backend == "sqlite":
        pytest.skip("sqlite: one writer: a user's write transaction blocks all of kiln's")
    hold = hold_type()
    reason = hold.xfail.get(backend)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with lock_wait(monkeypatch, TIMEOUT):
        store = await open_store(store_url)
        bench = Bench(store_url, store)
        try:
            await bench.play(hold)
        finally:
            await bench.close()
            await store.close()
    found = bench.violations(hold)
    assert not found, "\n".join(found)
