"""Capped counts for the stores without TABLESAMPLE (MariaDB, SQLite): the rule that
turns a read counted up to ``cap + 1`` and, when something passed the cap, a sample
(kiln.stores._sample) into the counts the dashboard and kilnotel show.

Each store finds the pairs (a loose scan of an index that leads with the state: one
descent a pair) and counts each through its index up to ``cap + 1`` rows, so the read
costs at most (pairs x cap) index entries plus one sample, whatever the table holds.
Here: a pair counted at most ``cap`` is exact; one past it is the sample's estimate,
never below ``cap + 1``, and marked. PostgreSQL's counts follow the same rule with its
own sample (kiln.stores.postgres._counts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from kiln._model._job import JobState, KindCount, StateCount
from kiln.stores._sample import Sample

Pair = tuple[str, str]

# the kinds' counts (Client.kind_counts) are capped per kind and state at this at most:
# their cap (KIND_COUNT_CAP, 1,000) is PostgreSQL's per state; counted per pair here,
# 100 kinds in three states at 1,000 each read 300,000 index entries a refresh
PAIR_CAP = 100


def over(counted: Mapping[Pair, int], cap: int) -> bool:
    """Whether a pair passed the cap, so the caller must read a sample."""
    return any(n > cap for n in counted.values())


def kind_over(counted: Iterable[tuple[str, str, int]], cap: int) -> bool:
    """Whether a kind's available jobs, read (queue, kind, jobs), passed the cap."""
    per_kind: Counter[str] = Counter()
    for _, kind, n in counted:
        per_kind[kind] += n
    return any(n > cap for n in per_kind.values())


AVAILABLE_COLS = ("queue", "kind", "state")  # the columns of available_by_kind's sample


def available(sample: Sample) -> Sample:
    """A sample read with AVAILABLE_COLS, keyed (queue, kind) over its available jobs."""
    return Sample({(q, k): n for (q, k, state), n in sample.jobs.items()
                   if state == "available"}, sample.whole)


def _fold(
    counted: Mapping[Pair, int], cap: int, sample: Sample | None
) -> dict[Pair, tuple[int, bool]]:
    out: dict[Pair, tuple[int, bool]] = {}
    for key, n in counted.items():
        if n <= cap:
            out[key] = (n, False)
        elif sample is None:
            raise ValueError("a count passed the cap: a sample is needed")
        elif sample.whole:  # the sample read every job: its count is exact
            out[key] = (sample.estimate(key), False)
        else:
            out[key] = (max(cap + 1, sample.estimate(key)), True)
    return out


def state_counts(counted: Mapping[Pair, int], cap: int, sample: Sample | None) -> list[StateCount]:
    """``counted``: (queue, state) -> jobs counted up to ``cap + 1``; ``sample`` keyed
    (queue, state), None when no pair passed the cap."""
    return [StateCount(queue=q, state=JobState(s), count=n, estimated=e)
            for (q, s), (n, e) in sorted(_fold(counted, cap, sample).items())]


def kind_counts(counted: Mapping[Pair, int], cap: int, sample: Sample | None) -> list[KindCount]:
    """``counted``: (kind, state) -> jobs counted up to ``cap + 1`` (at most PAIR_CAP);
    ``sample`` keyed (kind, state)."""
    return [KindCount(k, JobState(s), n, estimated=e)
            for (k, s), (n, e) in sorted(_fold(counted, cap, sample).items())]


def available_by_kind(
    counted: Iterable[tuple[str, str, int]], cap: int, sample: Sample | None
) -> list[tuple[str, str, int]]:
    """``counted``: (queue, kind, jobs) from reading each kind's available jobs up to
    ``cap + 1``; ``sample`` keyed (queue, kind) over the available jobs. A kind with at
    most ``cap`` is exact in each of its queues. A kind past the cap is spread over
    the queues its capped read or the sample saw it in, each at its estimate, never
    below the jobs of it the capped read saw there."""
    seen: dict[Pair, int] = {}
    per_kind: dict[str, int] = {}
    for queue, kind, n in counted:
        seen[(queue, kind)] = seen.get((queue, kind), 0) + n
        per_kind[kind] = per_kind.get(kind, 0) + n
    big = {k for k, n in per_kind.items() if n > cap}
    if big and sample is None:
        raise ValueError("a kind passed the cap: a sample is needed")
    out = {key: n for key, n in seen.items() if key[1] not in big}
    if sample is not None and big:
        pairs = {key for key in seen if key[1] in big}
        pairs |= {(str(q), str(k)) for q, k in sample.jobs if k in big}
        for key in pairs:
            n = sample.estimate(key)
            out[key] = n if sample.whole else max(seen.get(key, 0), n)
    return sorted((q, k, n) for (q, k), n in out.items() if n)


def rate_backlog(counted: Mapping[str, int], cap: int, sample: Sample | None,
                 limit: int) -> list[tuple[str, int]]:
    """The ``limit`` rate keys with the most due pending jobs, most first, then by key:
    ``counted`` key -> due jobs counted up to ``cap + 1``; ``sample`` keyed (key,) over
    the due pending jobs. A key past the cap is estimated, never below ``cap + 1``."""
    folded = _fold({(k, ""): n for k, n in counted.items() if n}, cap,
                   None if sample is None else Sample(
                       {(k[0], ""): n for k, n in sample.jobs.items()}, sample.whole))
    ranked = sorted(((k, n) for (k, _), (n, _) in folded.items()), key=lambda kv: (-kv[1], kv[0]))
    return ranked[:limit]


def due_pending(sample: Sample) -> Sample:
    """A sample read with (rate_key, state, due), keyed (rate_key,) over its due
    pending jobs (``due``: the store's ``run_at <= now`` as 1 or 0)."""
    return Sample({(k,): n for (k, state, due), n in sample.jobs.items()
                   if state == "pending" and due in ("1", "True")}, sample.whole)
