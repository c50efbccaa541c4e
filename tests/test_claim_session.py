"""ClaimSession's states: IDLE, CLAIMING (the pool's own claim), ARMED (a watch waits for
a notification), TAKEN (the watch handed rows over before its commit), and back."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kiln._events import EventHub
from kiln._model._job import JobRow
from kiln._server._claim_session import ClaimSession, ClaimState
from kiln._server._identity import Identity
from tests.support.parts import row
from tests.test_pool_watch import WatchStore


class SlowStore(WatchStore):
    def __init__(self) -> None:
        super().__init__()
        self.answer = asyncio.Event()

    async def job_claim(
        self, queue: str, kinds: Sequence[str], limit: int, server_id: str
    ) -> list[JobRow]:
        await self.answer.wait()
        return await super().job_claim(queue, kinds, limit, server_id)


def state(session: ClaimSession) -> ClaimState:
    return session.state  # read afresh: mypy would narrow the attribute


def _session(store: WatchStore, identity: Identity, accepted: list[list[JobRow]],
             handed: list[JobRow]) -> ClaimSession:
    def accept(rows: list[JobRow]) -> bool:
        accepted.append(rows)
        return True

    return ClaimSession(queue="q", kinds=["k"], store=store,  # type: ignore[arg-type]
                        events=EventHub(), identity=identity, limited=False,
                        accept=accept, hand_back=handed.extend, roll_back=lambda rows: None,
                        on_taken=lambda: None)


async def test_a_watch_goes_armed_taken_idle_and_its_gate_opens() -> None:
    store, accepted, handed = WatchStore(), [], []  # type: ignore[var-annotated]
    session = _session(store, Identity.named("s1"), accepted, handed)
    assert state(session) is ClaimState.IDLE and not session.watching()
    watch = session.arm(4)
    assert watch is not None
    assert state(session) is ClaimState.ARMED and session.watching()
    store.watches[0].claim([row(1), row(2)])
    assert state(session) is ClaimState.TAKEN and not session.watching()
    assert set(session.gates) == {1, 2} and session.held() == {1, 2}
    assert await session.disarm(watch) == 2
    assert state(session) is ClaimState.IDLE and session.gates == {}
    await asyncio.wait_for(session.settled(1), 1)  # its gate is open
    assert [[r.id for r in rows] for rows in accepted] == [[1, 2]] and handed == []


async def test_the_pools_own_claim_is_claiming_while_in_flight() -> None:
    store, accepted, handed = SlowStore(), [], []  # type: ignore[var-annotated]
    session = _session(store, Identity.named("s1"), accepted, handed)
    store.claimable = [row(3)]
    claim = asyncio.ensure_future(session.claim(4))
    await asyncio.sleep(0.01)
    assert state(session) is ClaimState.CLAIMING and session.claim_age() is not None
    store.answer.set()
    assert [r.id for r in await claim] == [3]
    assert state(session) is ClaimState.IDLE and session.claim_age() is None


async def test_rows_a_watch_took_under_an_id_given_up_since_go_back() -> None:
    store, accepted, handed = WatchStore(), [], []  # type: ignore[var-annotated]
    identity = Identity.named("s1")
    session = _session(store, identity, accepted, handed)
    watch = session.arm(4)
    assert watch is not None
    identity.rejoined(identity.renewed())  # a rejoin while the watch was armed
    store.watches[0].claim([row(4)])
    assert await session.disarm(watch) == 1
    assert accepted == [] and [r.id for r in handed] == [4]
