"""Conformance: reading the audit log by action, actor (contains), time and page
(kiln._model._job.AuditQuery), newest first, on every store."""

from __future__ import annotations

from datetime import timedelta

from kiln._model._job import AuditQuery
from kiln.stores import Store


async def test_audit_query_filters_and_pages(store: Store) -> None:
    for i in range(5):
        await store.audit_record(f"dashboard:alice@10.0.0.{i}", "requeue", i, {})
        await store.audit_record("cli:bob", "delete", i, {})
    await store.audit_record("dashboard:carol@127.0.0.1", "login", 0, {})
    everything = await store.audit_list(100)
    assert len(everything) == 11

    requeues = await store.audit_list(100, AuditQuery(action="requeue"))
    assert [e.count for e in requeues] == [4, 3, 2, 1, 0]
    assert [e.action for e in await store.audit_list(100, AuditQuery(action="requ"))] == []
    alice = await store.audit_list(100, AuditQuery(actor="alice"))
    assert {e.actor.split("@")[0] for e in alice} == {"dashboard:alice"} and len(alice) == 5
    assert len(await store.audit_list(100, AuditQuery(actor="dashboard:"))) == 6
    assert await store.audit_list(100, AuditQuery(actor="ALICE")) == []  # case-sensitive
    assert await store.audit_list(100, AuditQuery(actor="%")) == []  # no wildcard
    both = await store.audit_list(100, AuditQuery(action="delete", actor="bob"))
    assert [e.count for e in both] == [4, 3, 2, 1, 0]

    # pages: ids below the last one shown
    first = await store.audit_list(4, AuditQuery(actor="alice"))
    rest = await store.audit_list(4, AuditQuery(actor="alice", before=first[-1].id))
    assert [e.count for e in first] == [4, 3, 2, 1] and [e.count for e in rest] == [0]

    # time: [since, until) on the database's own clock
    newest = everything[0]
    assert [e.id for e in await store.audit_list(100, AuditQuery(since=newest.at))] == [
        newest.id]
    assert newest.id not in [e.id for e in await store.audit_list(
        100, AuditQuery(until=newest.at))]
    assert len(await store.audit_list(100, AuditQuery(
        since=everything[-1].at, until=newest.at + timedelta(seconds=1)))) == 11
    assert await store.audit_list(100, AuditQuery(since=newest.at + timedelta(seconds=1))) == []
