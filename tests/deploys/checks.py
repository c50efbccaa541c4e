"""Whether a deploy sequence ended as its case says.

First the chaos suite's accounting (tests/chaos/ledger.py): no job lost, none left
unfinished, none run twice at once, none completed by an attempt the ledger cannot
account for, every rerun explained by a stop of the server that ran it or by a failure
its args asked for, and no server fenced itself. Then what a case adds: each group's
expected end (state, queue, max_attempts, how many ids and inserts its calls
returned), caps held, limits lifted, rates held, and jobs left where no live server
can claim them reported by kiln. Nothing here talks to a database.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kiln import JobRow, JobState
from tests.chaos.ledger import UNFINISHED, account, executions, rate_violations
from tests.deploys.plan import (
    COMPLETED_OR_REPORTED,
    FAILED,
    FAILED_FOR_GOOD,
    AtOnce,
    Cap,
    Case,
    Rate,
)
from tests.deploys.sequence import CONFIG, Run
from tests.deploys.versions import FAIL_REASON

Span = tuple[int, float, float]  # job id, start, end (inf: no end line)


def violations(case: Case, run: Run) -> list[str]:
    out = _ledger(run)
    for group, ids in run.groups:
        out += _group(group.expect, group.queue, group.max_attempts, ids, run.rows)
        if group.expect == FAILED_FOR_GOOD:
            out += _failed_for_good(case, ids, run)
        if group.distinct is not None and len(set(ids)) != group.distinct:
            out.append(f"{group.kind} enqueued by {group.by} in phase {group.phase}: "
                       f"{len(set(ids))} distinct ids, expected {group.distinct}")
        inserted = sum(1 for i in ids if i.inserted)
        if group.inserted is not None and inserted != group.inserted:
            out.append(f"{group.kind} enqueued by {group.by} in phase {group.phase}: "
                       f"{inserted} calls inserted a job, expected {group.inserted}")
    spans = _spans(run.ledger.lines)
    for cap in case.caps:
        out += _cap(cap, spans, run)
    for lifted in case.at_once:
        out += _at_once(lifted, spans, run)
    for rate in case.rates:
        out += _rate(rate, run)
    out += _stranded(run)
    return out


def _ledger(run: Run) -> list[str]:
    """The chaos ledger over every job that must end, or has ended, completed."""
    rows = run.rows
    failing = {i for g, ids in run.groups if g.expect in (FAILED, FAILED_FOR_GOOD)
               for i in ids}
    may_wait = {i for g, ids in run.groups if g.expect == COMPLETED_OR_REPORTED for i in ids}
    checked = sorted(({i for _g, ids in run.groups for i in ids} - may_wait)
                     | {i for i in may_wait if i in rows and rows[i].state not in UNFINISHED})
    result = account(run.ledger.lines, rows, checked, float(CONFIG.dead_after))
    # a job the case expects to fail has not been lost: its own checks follow
    out = [v for v in result["violations"]
           if not any(v.startswith(f"job {i}: ended failed") for i in failing)]
    if result["overlaps"]:
        out.append(f"{result['overlaps']} executions still ran when the next one of their job"
                   " started")
    if result["self_fences"]:
        out.append(f"servers fenced themselves {result['self_fences']} times")
    return out


def _group(expect: str, queue: str | None, max_attempts: int | None, ids: Sequence[int],
           rows: Mapping[int, JobRow]) -> list[str]:
    out = []
    for i in sorted(set(ids)):
        row = rows.get(i)
        if row is None:
            continue  # the ledger said so
        if expect == FAILED and (row.state is not JobState.FAILED
                                 or row.attempt != row.max_attempts):
            out.append(f"job {i}: {row.state.value} at attempt {row.attempt}/"
                       f"{row.max_attempts}, expected failed having used every attempt")
        if queue is not None and row.queue != queue:
            out.append(f"job {i} ({row.kind}): in queue {row.queue!r}, expected {queue!r}")
        if max_attempts is not None and row.max_attempts != max_attempts:
            out.append(f"job {i} ({row.kind}): max_attempts {row.max_attempts}, expected "
                       f"{max_attempts}")
    return out


def _failed_for_good(case: Case, ids: Sequence[int], run: Run) -> list[str]:
    """Failed at once by kiln.Fail: below the row's attempts, the last error the Fail's,
    the last attempt run by a version that knows Fail (an older one retried its own)."""
    out = []
    knows = {v.name: v.knows_fail for v in (case.a, case.b)}
    for i in sorted(set(ids)):
        row = run.rows.get(i)
        if row is None:
            continue  # the ledger said so
        last = row.errors[-1].error if row.errors else None
        if row.state is not JobState.FAILED or row.attempt >= row.max_attempts \
                or last is None or not last.startswith(f"Fail: {FAIL_REASON}"):
            out.append(f"job {i}: {row.state.value} at attempt {row.attempt}/"
                       f"{row.max_attempts}, last error {last!r}: expected failed for good "
                       "by kiln.Fail with attempts left")
            continue
        starts = [ln for ln in run.ledger.lines if ln["ev"] == "start" and ln["job"] == i]
        version = run.ledger.versions.get(starts[-1]["pid"]) if starts else None
        if version is None or not knows.get(version, False):
            out.append(f"job {i}: failed for good after its last attempt ran on version "
                       f"{version}, which does not know kiln.Fail")
    return out


def _spans(lines: Sequence[Mapping[str, Any]]) -> list[Span]:
    """Each execution from its start line to its end, cancelled or raise line."""
    raised = {ln["exec"]: ln["t"] for ln in lines if ln["ev"] == "fault" and "exec" in ln}
    out = []
    for e in executions(lines).values():
        end = e.end if e.end is not None else e.cancelled
        out.append((e.job, e.start, end if end is not None else raised.get(e.id, math.inf)))
    return out


def _phase(run: Run, t: float) -> str:
    return "a" if t < run.marks["ab"] else "ab" if t < run.marks["b"] else "b"


def _selected(spans: Iterable[Span], run: Run, kind: str | None, queue: str | None,
              phases: Sequence[str], enqueued_by: Sequence[str] = ("a", "b")) -> list[Span]:
    by = {int(i): g.by for g, ids in run.groups for i in ids}
    out = []
    for span in spans:
        row = run.rows.get(span[0])
        if row is None or by.get(row.id) not in enqueued_by:
            continue
        if (kind is None or row.kind == kind) and (queue is None or row.queue == queue) \
                and _phase(run, span[1]) in phases:
            out.append(span)
    return out


def most_at_once(spans: Iterable[Span]) -> int:
    """The most spans open at one moment (one that ends as another starts: not both)."""
    edges = sorted([(s, 1) for _j, s, _e in spans] + [(e, -1) for _j, _s, e in spans])
    peak = now = 0
    for _t, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def _cap(cap: Cap, spans: Sequence[Span], run: Run) -> list[str]:
    chosen = _selected(spans, run, cap.kind, cap.queue, cap.phases, cap.enqueued_by)
    groups: dict[Any, list[Span]] = {}
    for span in chosen:
        args = run.rows[span[0]].args
        key = args.get(cap.by) if cap.by is not None and isinstance(args, dict) else None
        groups.setdefault(key, []).append(span)
    what = f"{cap.kind or 'queue ' + str(cap.queue)} in phases {cap.phases}"
    if len(chosen) <= cap.max:
        return [f"cap of {what}: only {len(chosen)} executions to check (nothing to hold)"]
    return [f"cap of {what}: {most_at_once(members)} at once"
            f"{'' if cap.by is None else f' for {cap.by}={key!r}'}, cap {cap.max}"
            for key, members in groups.items() if most_at_once(members) > cap.max]


def _at_once(lifted: AtOnce, spans: Sequence[Span], run: Run) -> list[str]:
    peak = most_at_once(_selected(spans, run, lifted.kind, lifted.queue, lifted.phases))
    if peak >= lifted.least:
        return []
    return [f"{lifted.kind or 'queue ' + str(lifted.queue)} in phases {lifted.phases}: at most"
            f" {peak} at once, expected at least {lifted.least} (the limit was lifted)"]


def _rate(rate: Rate, run: Run) -> list[str]:
    since = run.marks[rate.since]
    rows = [r for r in run.rows.values() if r.kind == rate.kind and r.admitted_at is not None
            and r.admitted_at.timestamp() >= since]
    buckets = {None: rows} if rate.keys is None else \
        {k: [r for r in rows if r.rate_key == k] for k in rate.keys}
    bound = rate.limit.rate + rate.limit.burst
    out = []
    for key, chosen in buckets.items():
        what = f"rate of {rate.kind}{'' if key is None else f' key {key!r}'}"
        if len(chosen) <= bound:
            out.append(f"{what} from phase {rate.since}: only {len(chosen)} admissions, "
                       f"which no window can exceed {bound} with (nothing to hold)")
            continue
        out += [f"{what} from phase {rate.since}: {v}"
                for v in rate_violations(chosen, rate.limit)]
    return out


def _stranded(run: Run) -> list[str]:
    """Jobs that may wait where no live server claims them, only if kiln says so: a
    count of such jobs, or a live server's health naming their kind or queue."""
    waiting = [run.rows[i] for g, ids in run.groups if g.expect == COMPLETED_OR_REPORTED
               for i in sorted(set(ids)) if i in run.rows and run.rows[i].state in UNFINISHED]
    if not waiting:
        return []
    reasons = " ".join(r for h in run.health for r in h.reasons)
    told = [r for r in waiting if r.kind in reasons or r.queue in reasons]
    if (run.reported is not None and run.reported >= len(waiting)) or len(told) == len(waiting):
        return []
    where = sorted({f"{r.kind} in {r.queue} ({r.state.value})" for r in waiting})
    return [f"{len(waiting)} jobs wait where no live server can claim them ({', '.join(where)})"
            f" and kiln does not say so (count: {run.reported}, health: "
            f"{[h.ok for h in run.health]} {reasons!r})"]


def describe(run: Run) -> str:
    """The run in a few lines, for a failure's message: when each phase began, and
    each job's row and executions (server number and version, relative times)."""
    t0 = run.marks["a"]
    out = [f"phases: {', '.join(f'{p} +{t - t0:.2f}s' for p, t in run.marks.items())}"]
    runs: dict[int, list[str]] = {}
    for job, start, end in sorted(_spans(run.ledger.lines), key=lambda s: s[1]):
        runs.setdefault(job, []).append(f"+{start - t0:.2f}..+{end - t0:.2f}")
    for group, ids in run.groups:
        for i in ids:
            row = run.rows.get(i)
            state = "gone" if row is None else \
                f"{row.state.value} {row.queue} attempt {row.attempt}/{row.max_attempts}"
            out.append(f"job {i} {group.kind} by {group.by} in {group.phase}: {state}; "
                       f"ran {runs.get(i, [])}")
    out += [f"server {ln['pid']} fenced itself at +{ln['t'] - t0:.2f}s: {ln['reason']}"
            for ln in run.ledger.lines if ln["ev"] == "fenced"]
    return "\n".join(out)
