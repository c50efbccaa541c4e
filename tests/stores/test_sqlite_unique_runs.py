"""SQLite: a batch's unique jobs go in as runs whose keys are cut from one blob of
fixed-width keys (kiln.stores.sqlite._runs); a key of another width (a NewJob built by
hand) takes the row-by-row executemany instead, with the same answers."""

from __future__ import annotations

from pathlib import Path

from kiln import EnqueueResult, Unique
from kiln._model._build import build_job
from kiln._model._job import NewJob
from kiln.stores.sqlite import SQLiteStore

BY_TENANT = Unique(by=("args.tenant",))


def job(tenant: int, key: str | None = None) -> NewJob:
    new = build_job("k", {"tenant": tenant}, None, queue="q", unique=BY_TENANT)
    if key is not None:
        new.unique_key = key
    return new


def answers(results: list[int]) -> list[tuple[int, bool]]:
    assert all(isinstance(r, EnqueueResult) for r in results)
    return [(int(r), r.inserted) for r in results]  # type: ignore[attr-defined]


async def test_keys_of_another_width_take_the_executemany_path(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "k.db"))
    await store.migrate()
    await store.open()
    try:
        first = await store.job_insert_many([job(1, "short"), job(2), job(3, "short")])
        a, b = int(first[0]), int(first[1])
        assert answers(first) == [(a, True), (b, True), (a, False)]
        again = await store.job_insert_many([job(4), job(5, "short"), job(2)])
        assert answers(again)[1:] == [(a, False), (b, False)] and answers(again)[0][1]
        rows = [await store.job_get(int(i)) for i in (a, b)]
        assert [r.args for r in rows if r is not None] == [{"tenant": 1}, {"tenant": 2}]
    finally:
        await store.close()
