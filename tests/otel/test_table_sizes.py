"""The kiln.table.* gauges: the jobs table's size, read rarely, by the publisher only.

Read through the Prometheus exposition as a scrape would. The read rides on the counts
refresh but at most once per sizes_ttl, a failing read never fails the counts, and a
stopped server (whose process lives on) exports no sizes.
"""

from __future__ import annotations

import math
from urllib.parse import urlsplit

import pytest

import kiln
import kilnotel
from kiln.stores import TableSize, store_from_url
from kilnotel import names as n
from kilnotel._counts import CountsCache
from kilnotel._sizes import SizesCache
from tests.support.otel import Running, fast_config, leads, value
from tests.support.waits import wait_for

ROWS = n.TABLE_ROWS_ESTIMATE.prometheus_name
DEAD = n.TABLE_DEAD_ROWS.prometheus_name
BYTES = n.TABLE_BYTES.prometheus_name
FREE = n.TABLE_FREE_BYTES.prometheus_name


async def test_the_leader_exports_the_jobs_table_size(
    store_url: str, app: kiln.App, client: kiln.Client
) -> None:
    for i in range(5):
        await client.enqueue("ok", {"i": i})
    server = app.server({"default": 1}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    observer = kilnotel.observe(server, provider, traces=False, counts_ttl=60)
    assert value(registry, BYTES, table="kiln_jobs") is None  # nothing read yet
    running = Running(server)
    await running.started()
    await wait_for(lambda: leads(server), 10, "leadership")
    await observer.refresh_sizes()
    postgres = urlsplit(store_url).scheme.startswith("postgres")
    assert (value(registry, BYTES, table="kiln_jobs") or 0) > 0
    rows = value(registry, ROWS, table="kiln_jobs")
    assert rows is not None and rows >= 0  # an estimate: PostgreSQL has not analyzed yet
    if urlsplit(store_url).scheme == "sqlite":
        assert rows == 5  # the id span, exact without deletes
    assert (value(registry, DEAD, table="kiln_jobs") is not None) == postgres
    assert (value(registry, FREE, table="kiln_jobs") is not None) == (not postgres)
    await running.stop()
    assert value(registry, BYTES, table="kiln_jobs") is None  # stopped: exports nothing


class CountingClient:
    """A client whose table_sizes() is counted and may fail; the rest is the real one."""

    def __init__(self, client: kiln.Client, fail: bool = False) -> None:
        self._client = client
        self.fail = fail
        self.reads = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._client, name)

    async def table_sizes(self) -> list[TableSize]:
        self.reads += 1
        if self.fail:
            raise kiln.StoreError("table_sizes", "statistics view unreadable")
        return await self._client.table_sizes()


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_sizes_are_read_at_most_once_per_ttl_and_never_fail_the_counts(
    store_url: str,
) -> None:
    store = store_from_url(store_url)
    await store.open()
    await store.migrate()
    try:
        counting = CountingClient(kiln.Client(store))
        sizes = SizesCache(counting, ttl=3600)  # type: ignore[arg-type]
        counts = CountsCache(counting, 60, ["q"], lambda: True, sizes=sizes)  # type: ignore[arg-type]
        for _ in range(3):
            await counts.refresh()
        assert counting.reads == 1 and counts.refreshes == 3
        assert [t.table for t in sizes.current()] == ["kiln_jobs"]

        counting.fail = True
        sizes.tried_at = -math.inf  # the ttl has passed
        await counts.refresh()  # the failed sizes read does not fail the counts
        assert counting.reads == 2 and sizes.errors == 1 and counts.refreshes == 4
        assert sizes.current()  # the last good sizes stand until max_age
        sizes.ok_at -= sizes.max_age + 1
        assert sizes.current() == ()
    finally:
        await store.close()


def test_bad_sizes_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="sizes_ttl must be positive"):
        SizesCache(None, 0)  # type: ignore[arg-type]
