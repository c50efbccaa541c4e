"""Conformance: recurring-job slots and the audit log."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from kiln._model._job import JobFilter
from kiln.stores import Store
from tests.stores.factories import job, state_of


async def test_cron_slot_is_enqueued_once(store: Store) -> None:
    slot = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    assert await store.cron_last_slot("nightly") is None
    first = await store.cron_enqueue("nightly", slot, job(kind="cron"))
    assert first is not None and await state_of(store, first) == "available"
    assert await store.cron_enqueue("nightly", slot, job(kind="cron")) is None
    assert await store.cron_enqueue("nightly", slot - timedelta(hours=1), job()) is None
    assert await store.cron_last_slot("nightly") == slot
    later = await store.cron_enqueue("nightly", slot + timedelta(days=1), job(kind="cron"))
    assert later is not None and later != first
    assert await store.cron_last_slot("nightly") == slot + timedelta(days=1)
    assert await store.cron_enqueue("other", slot, job()) is not None


async def test_cron_slot_once_under_concurrent_callers(store: Store, other_store: Store) -> None:
    for minute in range(3):
        slot = datetime(2030, 1, 1, 0, minute, tzinfo=UTC)
        got = await asyncio.gather(
            *(s.cron_enqueue("every-minute", slot, job(kind="cron"))
              for s in [store, other_store] * 4)
        )
        assert sum(1 for g in got if g is not None) == 1
    assert await store.job_count(JobFilter()) == 3


async def test_audit_record_and_list_newest_first(store: Store) -> None:
    await store.audit_record("alice", "requeue", 3, {"filter": {"state": "failed"}})
    await store.audit_record("bob", "delete", 1, {})
    entries = await store.audit_list()
    assert [(e.actor, e.action, e.count) for e in entries] == [("bob", "delete", 1),
                                                              ("alice", "requeue", 3)]
    assert entries[1].detail == {"filter": {"state": "failed"}} and entries[0].id > entries[1].id
    assert entries[0].at.tzinfo is not None
    assert len(await store.audit_list(limit=1)) == 1
