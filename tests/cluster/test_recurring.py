"""Recurring jobs on three servers: every slot once, none missed while a leader ran,
and only the latest of the slots missed between leaders.
"""

from __future__ import annotations

import asyncio
import collections
import math
import time
from datetime import datetime

from kiln import JobFilter
from tests.support.cluster import Cluster
from tests.support.waits import wait_for

TTL = 3.0  # a long lease: the gap between leaders spans whole slots


def leader_terms(c: Cluster, killed: dict[int, float], end: float) -> list[tuple[float, float]]:
    """(gained, lost) per term, from the workers' LeaderChanged events."""
    terms = []
    for gain in c.events("leader", is_leader=True):
        lost = [e["t"] for e in c.events("leader", pid=gain["pid"], is_leader=False)
                if e["t"] >= gain["t"]]
        until = min([*lost, killed.get(gain["pid"], end), end])
        terms.append((gain["t"], until))
    return terms


FIRST_PASS_LAG = 0.1  # seconds from taking the lease to the scheduler's first pass, at most


async def test_every_slot_once_across_servers_and_leader_changes(cluster: Cluster) -> None:
    c = cluster
    schedules = [{"name": "every-second", "kind": "tick", "every": 1.0}]
    await asyncio.gather(*(c.start(label, {"ticks": 2}, schedules=schedules, leader_ttl=TTL)
                           for label in ("a", "b", "c")))
    first = await c.leader()
    await asyncio.sleep(4)
    killed_at = first.kill()
    gained = await wait_for(
        lambda: [e for e in c.events("leader", is_leader=True) if e["t"] > killed_at],
        TTL + 5, "a new leader",
    )
    await asyncio.sleep(4)
    end = time.time()

    jobs = await c.store.job_list(JobFilter(kind="tick"), limit=1000)
    slots = [datetime.fromisoformat(j.metadata["kiln.slot"]).timestamp() for j in jobs]
    duplicates = [s for s, n in collections.Counter(slots).items() if n > 1]
    assert not duplicates, f"slots enqueued twice: {duplicates}"
    assert all(s == int(s) for s in slots)  # interval slots sit on whole seconds

    terms = leader_terms(c, {first.pid: killed_at}, end)
    begin = min(g for g, _ in terms)
    required = {
        s for s in range(math.ceil(begin) - 1, math.floor(end))
        if any(g <= s + 0.5 and until >= s + 0.9 for g, until in terms)
    }
    missing = sorted(required - set(slots))
    assert not missing, f"slots missed while a leader ran: {missing} (terms {terms})"

    new_term = gained[0]["t"]
    leaderless = {s for s in range(math.floor(killed_at) + 1, math.floor(new_term))
                  if s + 1 <= new_term}
    assert leaderless, "the gap between leaders should span a whole slot"
    assert not leaderless & set(slots), "only the latest missed slot may be enqueued"
    # ...and that one is: the latest slot when the new leader's first pass ran, a moment
    # after it took the lease (FIRST_PASS_LAG), which can be the next second's slot
    latest = {math.floor(new_term), math.floor(new_term + FIRST_PASS_LAG)}
    assert latest & set(slots), f"none of {sorted(latest)} enqueued"

    ran = {e["job"] for e in c.events("tick")}
    # a tick the killed worker had claimed waits for its rescue, after this test's end
    lost = [j.id for j in jobs if j.id not in ran and j.server_id != first.first_id
            and j.created_at.timestamp() < end - 2]
    assert not lost, f"enqueued but never ran: {lost}"
    print(f"[{c.backend}] {len(slots)} slots over {end - begin:.1f}s, {len(terms)} leader "
          f"terms, gap {new_term - killed_at:.2f}s: {len(leaderless)} leaderless slot(s) "
          "skipped, none twice")
