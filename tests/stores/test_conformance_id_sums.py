"""Conformance: the fingerprint of a set of job ids (kiln._model._idset) is the same
whether the store sums it in SQL (``job_id_sums``, what a confirmation page shows) or
Python digests the ids read out (what the action checks before it acts)."""

from __future__ import annotations

from kiln._client import _bulk
from kiln._client._client import Client
from kiln._model import _idset
from kiln._model._job import JobFilter
from kiln.stores import Store
from tests.stores.factories import insert, job


async def test_the_store_sums_what_python_digests(store: Store) -> None:
    ids = await insert(store, *[job(args={"i": i}, queue="sums") for i in range(30)])
    f = JobFilter(queue="sums", max_id=max(ids))
    assert await store.job_id_sums(f) == _idset.sums(ids)
    picked = JobFilter(ids=tuple(ids[::3]), max_id=max(ids))
    assert await store.job_id_sums(picked) == _idset.sums(ids[::3])
    assert await store.job_id_sums(JobFilter(queue="none", max_id=max(ids))) == (0, 0, 0, 0, 0)


async def test_a_changed_set_changes_the_fingerprint(store: Store) -> None:
    ids = await insert(store, *[job(args={"i": i}, queue="fp") for i in range(6)])
    client = Client(store)
    bound, n, shown = await _bulk.counted(client, JobFilter(queue="fp"))
    assert (bound.max_id, n, shown) == (max(ids), 6, _bulk.digest(ids))
    # one job out and another in, the count and the sum of ids kept: still noticed
    a, b, c = ids[0], ids[2], ids[4]
    swapped = [i for i in ids if i not in (a, c)] + [a + 1, c - 1]
    assert sum(swapped) == sum(ids) and len(swapped) == len(ids)
    assert _bulk.digest(swapped) != shown
    assert b in swapped


def test_large_ids_stay_within_64_bits() -> None:
    big = [2**62, 2**62 + 1, 2**31 - 1, 2**31, 1]
    for job_id in big:
        c, d = _idset.mixes(job_id)
        assert 0 <= c < 2**31 and 0 <= d < 2**31
    sql = _idset.sums_sql("MOD({}, {})")
    assert sql.startswith("COUNT(*), COALESCE(MAX(id), 0), COALESCE(SUM(id), 0)")
