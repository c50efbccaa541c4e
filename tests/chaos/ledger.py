"""The accounting of a chaos run: every job checked against the ledger and the database.

Input: the ledger lines (tests/chaos/app.py, worker events, and the harness's
``fault`` lines, all on one host clock), the job rows after the queue settled, and the
ids that were enqueued. Output: the figures of the run and the list of violations.
Nothing here talks to a database or a process.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kiln import JobRow, JobState, RateLimit

# faults that end or interrupt what one worker process runs
PROCESS_FAULTS = ("kill", "term", "stop", "cut")
# faults that interrupt every worker at once
GLOBAL_FAULTS = ("db_outage", "db_restart")
CLOCK_SLACK = 0.05  # the database's clock and the ledger's are one host's clock
UNFINISHED = frozenset(
    {JobState.RUNNING, JobState.AVAILABLE, JobState.SCHEDULED, JobState.PENDING,
     JobState.AWAITING}
)


@dataclasses.dataclass
class Exec:
    """One execution of a handler: from its ``start`` line to its last line."""

    id: str
    job: int
    attempt: int
    server: str | None
    pid: int
    start: float
    cursor: int
    ckpts: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    sent: dict[int, float] = dataclasses.field(default_factory=dict)  # cursor: when written
    end: float | None = None
    cancelled: float | None = None
    refused: int = 0
    outcome: str | None = None  # the server's result event for this execution, and its error
    error: str | None = None


@dataclasses.dataclass(frozen=True)
class Fault:
    type: str
    t: float
    pid: int | None  # None: every worker (database faults)
    until: float  # when it was lifted (== t for kills and terms)


def executions(lines: Iterable[Mapping[str, Any]]) -> dict[str, Exec]:
    out: dict[str, Exec] = {}
    latest: dict[tuple[int, int], Exec] = {}  # (pid, job): its process's last execution
    for line in lines:
        ev = line["ev"]
        if ev == "start":
            e = Exec(line["exec"], line["job"], line["attempt"], line["server"], line["pid"],
                     line["t"], line["cursor"])
            out[e.id] = latest[e.pid, e.job] = e
        elif ev == "result" and (line["pid"], line["job"]) in latest:
            e = latest[line["pid"], line["job"]]
            e.outcome, e.error = line["outcome"], line.get("error")
        elif ev in ("ckpt", "end", "cancelled", "refused") and line.get("exec") in out:
            e = out[line["exec"]]
            if ev == "ckpt":
                e.ckpts.append((line["t"], line["cursor"]))
                e.sent[line["cursor"]] = line.get("sent", line["t"])
            elif ev == "end":
                e.end = line["t"]
            elif ev == "cancelled":
                e.cancelled = line["t"]
            else:
                e.refused += 1
    return out


def faults(lines: Iterable[Mapping[str, Any]]) -> list[Fault]:
    """What the harness did, and the fences servers put up by themselves: a server
    that could not confirm its heartbeat in time (a slow database, a starved CPU) fences
    itself and its jobs run again, which explains a rerun as a fault does."""
    found = []
    for ln in lines:
        if ln["ev"] == "fault":
            found.append(Fault(ln["type"], ln["began"], ln["target"], ln["until"]))
        elif ln["ev"] == "fenced":
            found.append(Fault("self_fence", ln["t"], ln["pid"], ln["t"]))
    return sorted(found, key=lambda f: f.t)


def cause_of(prev: Exec, nxt: Exec, all_faults: Sequence[Fault]) -> str | None:
    """The first fault that hit the process running ``prev`` (or every process) between
    its start and the start of ``nxt``: what made the job run again."""
    for f in all_faults:
        if f.t > nxt.start:
            break
        if f.until < prev.start:
            continue
        if f.pid is None or f.pid == prev.pid:
            return f.type
    return None


def _completing(row: JobRow, runs: Sequence[Exec]) -> Exec | None:
    matching = [e for e in runs if e.server == row.server_id and e.attempt == row.attempt
                and e.end is not None]
    return matching[-1] if matching else None


def _checkpoint_regressions(row: JobRow | None, runs: Sequence[Exec]) -> list[str]:
    """A start must resume from at least every checkpoint acknowledged before it, and the
    row must end with the last one."""
    acks = sorted(a for e in runs for a in e.ckpts)
    bad = []
    for e in runs:
        before = [c for t, c in acks if t < e.start]
        if before and e.cursor < max(before):
            bad.append(f"job {e.job}: exec {e.id} resumed from {e.cursor} after checkpoint "
                       f"{max(before)} was acknowledged")
    if row is not None and acks:
        final = int(row.params.get("cursor", 0))
        if final < max(c for _t, c in acks):
            bad.append(f"job {row.id}: row ends at cursor {final}, below acknowledged "
                       f"{max(c for _t, c in acks)}")
    return bad


def _zombie_writes(runs: Sequence[Exec], row: JobRow | None, stops: Sequence[Fault],
                   dead_after: float, out: dict[str, Any]) -> list[str]:
    """A process stopped for longer than dead_after must find itself fenced when it
    comes back: no checkpoint that it sends after waking may be written. A write it
    sent before the stop may be acknowledged after (it was on the wire), and a handler
    whose last await ended at the wake may return before the fence lands: its result
    is written if no one rescued the job meanwhile (the database's fencing decides),
    and is counted as ``woken_completions``."""
    bad = []
    for f in stops:
        if f.until - f.t <= dead_after:
            continue
        for e in runs:
            if e.pid != f.pid or e.start > f.t:
                continue
            late = [c for t, c in e.ckpts if e.sent.get(c, t) > f.until]
            if late:
                bad.append(f"job {e.job}: exec {e.id} of a process stopped "
                           f"{f.until - f.t:.1f}s checkpointed {late} after it woke")
            if row is not None and row.state is JobState.COMPLETED and e.end is not None \
                    and e.end > f.until and _completing(row, runs) is e:
                out["woken_completions"] += 1
    return bad


def _overlaps(runs: Sequence[Exec]) -> tuple[int, list[str]]:
    """Executions still running when the next one of their job started (a handler that
    outlived its fence or hand-back), and the writes such a zombie got accepted.

    A checkpoint is logged once the database acknowledged it, so its line can come
    late: a process stopped (or starved) between the commit and the log line wakes
    after its job ran again and logs a write that landed before the claim. What
    decides is when the write was sent and what the next execution resumed from: a
    write sent after the next execution started landed after its claim; one sent
    before and acknowledged after landed before the claim only if the next execution
    resumed from it (the claim reads the job's params), and after it otherwise."""
    count, bad = 0, []
    for i, e in enumerate(runs):
        if i + 1 == len(runs):
            continue
        nxt = runs[i + 1]
        last = max([e.start, *(t for t, _c in e.ckpts), e.end or 0.0, e.cancelled or 0.0])
        if last > nxt.start:
            count += 1
        accepted = [(c, e.sent.get(c, t), t) for t, c in e.ckpts if t > nxt.start
                    and (e.sent.get(c, t) > nxt.start or nxt.cursor < c)]
        if accepted:
            bad.append(f"job {e.job}: exec {e.id} had checkpoints {[c for c, _s, _t in accepted]}"
                       f" accepted after the next execution of its job started (exec {nxt.id}"
                       f" at {nxt.start:.3f}, resumed from {nxt.cursor}; sent, acknowledged:"
                       f" {[(round(s, 3), round(t, 3)) for _c, s, t in accepted]})")
    return count, bad


def _fenced_at(lines: Sequence[Mapping[str, Any]], pid: int | None, t: float) -> bool:
    """Whether process ``pid`` was fenced (and had not rejoined) at ``t``."""
    state = False
    for ln in lines:
        if ln["t"] > t:
            break
        if ln["pid"] == pid and ln["ev"] in ("fenced", "rejoined"):
            state = ln["ev"] == "fenced"
    return state


def _stops_fenced(lines: Sequence[Mapping[str, Any]], stops: Sequence[Fault],
                  all_faults: Sequence[Fault], dead_after: float) -> list[str]:
    """A process stopped past dead_after must fence itself once it runs again."""
    bad = []
    for f in stops:
        if f.until - f.t <= dead_after:
            continue
        ended = [g.t for g in all_faults if g.pid == f.pid and g.type in ("kill", "term")
                 and g.t > f.until]
        fenced = [ln["t"] for ln in lines if ln["ev"] == "fenced" and ln["pid"] == f.pid
                  and f.until <= ln["t"] <= f.until + 3.0]
        if not fenced and not (ended and ended[0] < f.until + 3.0) \
                and not _fenced_at(lines, f.pid, f.t):
            bad.append(f"process {f.pid} stopped {f.until - f.t:.1f}s did not fence itself "
                       "when it ran again")
    return bad


def rate_violations(rows: Iterable[JobRow], limit: RateLimit) -> list[str]:
    """No window of length ``per`` admits more than rate + burst jobs of the key."""
    admitted = sorted(r.admitted_at.timestamp() for r in rows if r.admitted_at is not None)
    bound = limit.rate + limit.burst
    bad = []
    j = 0
    for i, at in enumerate(admitted):
        while admitted[j] <= at - limit.per:
            j += 1
        if i - j + 1 > bound:
            bad.append(f"{i - j + 1} admissions in the {limit.per}s window ending at {at:.3f}"
                       f" (bound {bound})")
    return bad


def _told(e: Exec, nxt: Exec, lines: Sequence[Mapping[str, Any]]) -> str:
    """What the ledger holds of an execution's end, and what the servers did to its job
    before the next one started (rescues, reconciliations), for a violation's message."""
    ended = "returned" if e.end is not None else "cancelled" if e.cancelled is not None \
        else "no end line"
    acts = [f"{ln['ev']} by pid {ln['pid']} at {ln['t']:.3f}"
            f" ({ln.get('action') or ln.get('outcome')})" for ln in lines
            if ln["ev"] in ("rescued", "reconciled") and ln.get("job") == e.job
            and e.start <= ln["t"] <= nxt.start]
    return (f"{e.id} started {e.start:.3f}, {ended}, {e.refused} checkpoints refused, "
            f"server's outcome {e.outcome}: {e.error}; then {acts or 'nothing logged'}")


def _job_findings(job_id: int, row: JobRow | None, runs: Sequence[Exec],
                  all_faults: Sequence[Fault], out: dict[str, Any],
                  lines: Sequence[Mapping[str, Any]]) -> None:
    """Account for one job: duplicates and their causes, and every violation."""
    v: list[str] = out["violations"]
    if row is None:
        out["lost"].append(job_id)
        v.append(f"job {job_id}: row is gone")
        return
    if row.state in UNFINISHED:
        out["stuck"].append(job_id)
        v.append(f"job {job_id}: still {row.state.value} (attempt {row.attempt})")
        return
    if row.state is not JobState.COMPLETED:
        out["lost"].append(job_id)
        v.append(f"job {job_id}: ended {row.state.value}: {row.errors[-1:]!r}")
        return
    done = _completing(row, runs)
    if done is None:
        out["unaccounted"].append(job_id)
        v.append(f"job {job_id}: completed by {row.server_id} attempt {row.attempt}, "
                 "which no recorded attempt that ran to its end accounts for")
    elif done.end is not None and row.finished_at is not None \
            and row.finished_at.timestamp() < done.end - CLOCK_SLACK:
        out["unaccounted"].append(job_id)
        v.append(f"job {job_id}: completed {done.end - row.finished_at.timestamp():.2f}s "
                 f"before the handler of exec {done.id} returned")
    for prev, nxt in itertools.pairwise(runs):
        cause = cause_of(prev, nxt, all_faults)
        out["causes"][cause or "unexplained"] += 1
        if cause is None:
            v.append(f"job {job_id}: exec {nxt.id} ran again after {prev.id} with no kill, "
                     f"stop or cut of its process in between ({_told(prev, nxt, lines)})")
    ended = [e for e in runs if e.end is not None]
    if len(ended) > 1:
        explained = all(cause_of(a, b, all_faults) for a, b in itertools.pairwise(ended))
        out["ended_twice"] += 1
        if not explained:
            out["double_completed"].append(job_id)
            v.append(f"job {job_id}: ran to its end {len(ended)} times ({[e.id for e in ended]})"
                     " with no fault to explain it")


def account(lines: Sequence[Mapping[str, Any]], rows: Mapping[int, JobRow],
            ids: Sequence[int], dead_after: float, limit: RateLimit | None = None,
            limited_kind: str | None = None) -> dict[str, Any]:
    """Every job of ``ids`` checked against the ledger and its row; the jobs of
    ``limited_kind`` against ``limit`` (none without one). The deploy-sequence tier
    (tests/deploys) calls it too, with in-process servers numbered as ``pid``."""
    execs = executions(lines)
    all_faults = faults(lines)
    by_job: dict[int, list[Exec]] = defaultdict(list)
    for e in sorted(execs.values(), key=lambda e: e.start):
        by_job[e.job].append(e)
    out: dict[str, Any] = {"lost": [], "stuck": [], "unaccounted": [], "double_completed": [],
                           "ended_twice": 0, "causes": Counter(), "violations": [],
                           "woken_completions": 0}
    stops = [f for f in all_faults if f.type == "stop"]
    overlaps = 0
    for job_id in ids:
        row, runs = rows.get(job_id), by_job.get(job_id, [])
        _job_findings(job_id, row, runs, all_faults, out, lines)
        out["violations"] += _checkpoint_regressions(row, runs)
        out["violations"] += _zombie_writes(runs, row, stops, dead_after, out)
        n, bad = _overlaps(runs)
        overlaps += n
        out["violations"] += bad
    out["violations"] += _stops_fenced(lines, stops, all_faults, dead_after)
    limited = [r for r in rows.values() if limit is not None and r.kind == limited_kind]
    if limit is not None:
        out["violations"] += rate_violations(limited, limit)
    out["rate_checked"] = sum(1 for r in limited if r.admitted_at is not None)
    out["overlaps"] = overlaps
    out["faults"] = dict(Counter(f.type for f in all_faults if f.type != "self_fence"))
    out["self_fences"] = sum(1 for f in all_faults if f.type == "self_fence")
    out["executions"] = len(execs)
    out["duplicates"] = sum(out["causes"].values())
    out["causes"] = dict(out["causes"])
    return out
