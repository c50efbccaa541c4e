"""The declaration changes a deploy can make, one Case each (tests/deploys/plan.py).

A new feature whose declaration can change between deploys adds its change here: A's
declarations, B's, the jobs each version's producers enqueue in which phase, and the
end the case expects. Jobs ``in_flight`` run on A until A's servers stop them: they
are handed back, and B (or nobody) takes them.
A's producers may enqueue in phase ``b``: a web tier rolls apart from its workers.
A case that fails on today's main names its issue item in ``xfail``; the lead removes
it when the fix merges (strict: an xfail that passes fails the run).
"""

from __future__ import annotations

from typing import Any

import kiln
from tests.deploys.plan import (
    COMPLETED_OR_REPORTED,
    FAILED,
    FAILED_FOR_GOOD,
    AtOnce,
    Cap,
    Case,
    Enqueue,
    Rate,
    Version,
)

SHORT = 0.2
Q = "q"
PER_TENANT = kiln.Concurrency(max=1, key="args.tenant")
PER_TENANT_2 = kiln.Concurrency(max=2, key="args.tenant")
ONE_AT_A_TIME = kiln.Concurrency(max=1)
BY_KEY = kiln.Unique(by=("args.key",))
BY_KEY_TENANT = kiln.Unique(by=("args.key", "args.tenant"))
RATE_A = kiln.RateLimit(rate=10, per=1.0, burst=2)
RATE_B = kiln.RateLimit(rate=2, per=0.5)
RATE_TENANT = kiln.RateLimit(rate=2, per=0.5, key="args.tenant")


def jobs(n: int, seconds: float = SHORT, **args: Any) -> tuple[dict[str, Any], ...]:
    return tuple({"seconds": seconds, **args} for _ in range(n))


def in_flight(n: int, **args: Any) -> tuple[dict[str, Any], ...]:
    """Jobs still running on A when it stops (tests/deploys/versions.py)."""
    return jobs(n, in_flight=True, **args)


def app(name: str, queues: dict[str, int] | None = None, **kinds: dict[str, Any]) -> Version:
    """A version whose kinds are given as keyword arguments (``t_x`` is kind "t.x")."""
    return Version(name, {k.replace("_", "."): o for k, o in kinds.items()},
                   queues or {Q: 4})


CASES: list[Case] = [
    Case(
        "concurrency limit added",
        a=app("a", t_sync={"queue": Q}),
        b=app("b", t_sync={"queue": Q, "concurrency": PER_TENANT}),
        jobs=(Enqueue("a", "a", "t.sync", in_flight(2, tenant=1)),
              Enqueue("b", "ab", "t.sync", jobs(3, tenant=1)),
              Enqueue("b", "b", "t.sync", jobs(3, tenant=1) + jobs(2, tenant=2))),
        # from the first enqueue with it (docs/operating.md); A's keyless jobs run as
        # they were enqueued, and A's servers never take a keyed one
        caps=(Cap(1, kind="t.sync", by="tenant", enqueued_by=("b",)),),
    ),
    Case(
        "concurrency limit added while old producers enqueue",
        a=app("a", t_sync={"queue": Q}),
        b=app("b", t_sync={"queue": Q, "concurrency": PER_TENANT}),
        # A's producers go on enqueueing keyless jobs beside B's servers: an A server runs
        # one as it is, a B server gives it its key and hands it back first, so once only
        # B's servers are left every job runs under the limit (docs/operating.md)
        jobs=(Enqueue("a", "a", "t.sync", in_flight(1, tenant=1)),
              Enqueue("a", "ab", "t.sync", jobs(4, 0.3, tenant=1)),
              Enqueue("a", "b", "t.sync", jobs(3, 0.3, tenant=1)),
              Enqueue("b", "b", "t.sync", jobs(2, 0.3, tenant=1) + jobs(2, 0.3, tenant=2))),
        caps=(Cap(1, kind="t.sync", by="tenant", phases=("b",)),),
    ),
    Case(
        "concurrency limit removed",
        a=app("a", t_sync={"queue": Q, "concurrency": PER_TENANT}),
        b=app("b", t_sync={"queue": Q}),
        jobs=(Enqueue("a", "a", "t.sync", in_flight(1, tenant=1) + in_flight(1, tenant=2)
                      + jobs(2, tenant=1)),
              Enqueue("b", "ab", "t.sync", jobs(2, tenant=1)),
              Enqueue("b", "b", "t.sync", jobs(2, tenant=3)),
              # A's web tier rolls on its own: it enqueues under the limit still
              Enqueue("a", "b", "t.sync", jobs(2, tenant=4))),
        # no cap to check: B lifted it (A's cap while it runs is the conformance suite's)
    ),
    Case(
        "queue limit removed",
        a=Version("a", {"t.export": {"queue": "exports"}}, {"exports": 4},
                  queue_limits={"exports": 1}),
        b=Version("b", {"t.export": {"queue": "exports"}}, {"exports": 4}),
        # one at a time while A runs (B's servers too: they find A's limit), in flight
        # when A stops; then B's alone run the queue without it
        jobs=(Enqueue("a", "a", "t.export", jobs(5, 0.3)),
              Enqueue("b", "b", "t.export", jobs(6))),
        caps=(Cap(1, queue="exports", phases=("a", "ab")),),
        at_once=(AtOnce(2, queue="exports"),),
    ),
    Case(
        "kind moved to another queue",
        a=app("a", {"old": 4}, t_move={"queue": "old"}),
        b=app("b", {"new": 4}, t_move={"queue": "new"}),
        jobs=(Enqueue("a", "a", "t.move", in_flight(2), expect=COMPLETED_OR_REPORTED),
              Enqueue("b", "ab", "t.move", jobs(2), queue="new"),
              Enqueue("b", "b", "t.move", jobs(2), queue="new"),
              Enqueue("a", "b", "t.move", jobs(1), expect=COMPLETED_OR_REPORTED)),
    ),
    Case(
        "max_attempts lowered",
        a=app("a", t_flaky={"queue": Q, "max_attempts": 5}),
        b=app("b", t_flaky={"queue": Q, "max_attempts": 2}),
        # a job keeps the attempts it was enqueued with, whichever version runs it
        jobs=(Enqueue("a", "a", "t.flaky", in_flight(1) + jobs(2, fail_below=3),
                      max_attempts=5),
              Enqueue("b", "ab", "t.flaky", jobs(1, fail_below=3), expect=FAILED,
                      max_attempts=2),
              Enqueue("b", "b", "t.flaky", jobs(1, fail_below=3), expect=FAILED,
                      max_attempts=2),
              Enqueue("b", "b", "t.flaky", jobs(1, fail_below=2), max_attempts=2)),
    ),
    Case(
        "unique added",
        a=app("a", t_u={"queue": Q}),
        b=app("b", t_u={"queue": Q, "unique": BY_KEY}),
        jobs=(Enqueue("a", "a", "t.u", in_flight(2, key=1), distinct=2),
              Enqueue("b", "ab", "t.u", jobs(3, 0.5, key=2), distinct=1, inserted=1),
              # A's jobs of key 1 hold no key: B's first one inserts
              Enqueue("b", "b", "t.u", jobs(2, 0.5, key=1), distinct=1, inserted=1)),
    ),
    Case(
        "unique removed",
        a=app("a", t_u={"queue": Q, "unique": BY_KEY}),
        b=app("b", t_u={"queue": Q}),
        jobs=(Enqueue("a", "a", "t.u", in_flight(2, key=1), distinct=1, inserted=1),
              # A's producer still dedupes against its job, running or handed back
              Enqueue("a", "ab", "t.u", jobs(1, key=1), inserted=0),
              Enqueue("b", "ab", "t.u", jobs(2, key=1), distinct=2, inserted=2),
              Enqueue("b", "b", "t.u", jobs(2, key=1), distinct=2, inserted=2)),
    ),
    Case(
        "rate limit changed",
        a=app("a", t_r={"queue": Q, "rate_limit": RATE_A}),
        b=app("b", t_r={"queue": Q, "rate_limit": RATE_B}),
        jobs=(Enqueue("a", "a", "t.r", in_flight(1) + jobs(3)),
              Enqueue("b", "b", "t.r", jobs(6, 0.05))),
        # B's rate from the moment B runs alone: its servers and producer declare it
        rates=(Rate("t.r", RATE_B, since="b"),),
    ),
    Case(
        "rate limit keyed by args added",
        a=app("a", t_r={"queue": Q, "rate_limit": RATE_A}),
        b=app("b", t_r={"queue": Q, "rate_limit": RATE_TENANT}),
        # A's jobs keep A's key ("t.r") and its limit, and end; B's go to one bucket per
        # tenant, from B's first enqueue, whoever enqueues (a bare producer too)
        jobs=(Enqueue("a", "a", "t.r", in_flight(1, tenant=1) + jobs(3, tenant=1)),
              Enqueue("b", "b", "t.r", jobs(3, 0.05, tenant=1) + jobs(3, 0.05, tenant=2)),
              Enqueue("b", "b", "t.r", jobs(2, 0.05, tenant=2), bare=True)),
        rates=(Rate("t.r", RATE_TENANT, since="b", keys=("t.r|1", "t.r|2")),),
    ),
    Case(
        "rate limit key removed",
        a=app("a", t_r={"queue": Q, "rate_limit": RATE_TENANT}),
        b=app("b", t_r={"queue": Q, "rate_limit": RATE_B}),
        # A's pending jobs keep their tenant keys (declared with their insert) and end
        jobs=(Enqueue("a", "a", "t.r", in_flight(1, tenant=1) + jobs(3, tenant=1)
                      + jobs(3, tenant=2)),
              Enqueue("b", "b", "t.r", jobs(5, 0.05, tenant=1))),
        rates=(Rate("t.r", RATE_TENANT, since="a", keys=("t.r|1", "t.r|2")),),
    ),
    Case(
        "kind removed",
        a=app("a", t_keep={"queue": Q}, t_old={"queue": Q}),
        b=app("b", t_keep={"queue": Q}),
        jobs=(Enqueue("a", "a", "t.old", in_flight(2), expect=COMPLETED_OR_REPORTED),
              Enqueue("a", "a", "t.keep", in_flight(1)),
              Enqueue("b", "ab", "t.keep", jobs(2)),
              Enqueue("b", "b", "t.keep", jobs(2)),
              Enqueue("a", "b", "t.old", jobs(1), expect=COMPLETED_OR_REPORTED)),
    ),
    Case(
        "a declaration with a field A does not know",
        a=app("a", t_a={"queue": Q}),
        b=Version("b", {"t.a": {"queue": Q}, "t.new": {"queue": Q, "max_attempts": 3}},
                  {Q: 4}, publishes={"t.new": {"retention": {"days": 7}}}),
        jobs=(Enqueue("a", "a", "t.a", in_flight(2)),
              Enqueue("a", "ab", "t.new", jobs(2), max_attempts=3),
              Enqueue("b", "b", "t.new", jobs(1), max_attempts=3)),
    ),
    Case(
        "a declaration value A cannot read",
        a=app("a", t_a={"queue": Q}),
        b=Version("b", {"t.a": {"queue": Q}, "t.new": {"queue": Q},
                        "t.other": {"queue": Q, "max_attempts": 3}}, {Q: 4},
                  publishes={"t.new": {"unique": {"by": ["meta.tenant"], "key": None,
                                                  "states": None, "period": None}}}),
        # A's producer resolves t.other from the published declarations: one it cannot
        # read (t.new's) must not stop it
        jobs=(Enqueue("a", "a", "t.a", in_flight(2)),
              Enqueue("a", "ab", "t.other", jobs(2), max_attempts=3),
              Enqueue("b", "b", "t.new", jobs(1))),
    ),
    Case(
        "a producer of B enqueues the new kind before any B worker started",
        a=app("a", t_keep={"queue": Q}),
        b=app("b", {Q: 4, "mail": 2}, t_keep={"queue": Q},
              t_mail={"queue": "mail", "max_attempts": 2}),
        jobs=(Enqueue("a", "a", "t.keep", in_flight(2)),
              Enqueue("b", "a", "t.mail", jobs(2), bare=True, queue="mail", max_attempts=2),
              Enqueue("b", "b", "t.mail", jobs(1), queue="mail", max_attempts=2)),
    ),
    Case(
        "kiln.Fail raised by B beside an older kiln that does not know it",
        # A's kiln predates kiln.Fail: its handler raises a plain error, which A retries;
        # B's raises Fail, which fails the job at once wherever A left it
        a=Version("a", {"t.bounce": {"queue": Q, "max_attempts": 20}}, {Q: 4},
                  knows_fail=False),
        b=app("b", t_bounce={"queue": Q, "max_attempts": 20}),
        jobs=(Enqueue("a", "a", "t.bounce", in_flight(1, fail_for_good=True),
                      expect=FAILED_FOR_GOOD),
              Enqueue("a", "a", "t.bounce", jobs(2, fail_for_good=True),
                      expect=FAILED_FOR_GOOD),
              Enqueue("a", "a", "t.bounce", in_flight(1)),
              Enqueue("b", "ab", "t.bounce", jobs(2, fail_for_good=True),
                      expect=FAILED_FOR_GOOD),
              Enqueue("b", "ab", "t.bounce", jobs(2)),
              Enqueue("b", "b", "t.bounce", jobs(1, fail_for_good=True),
                      expect=FAILED_FOR_GOOD, max_attempts=20),
              Enqueue("b", "b", "t.bounce", jobs(1))),
    ),
    Case(
        "queue limit added",
        a=Version("a", {"t.export": {"queue": "exports"}}, {"exports": 4}),
        b=Version("b", {"t.export": {"queue": "exports"}}, {"exports": 4},
                  queue_limits={"exports": 1}),
        # A's backlog (some in flight, handed back) and B's run one at a time once B's
        # servers alone run: held from the start of the first server that declares it
        jobs=(Enqueue("a", "a", "t.export", in_flight(2) + jobs(3)),
              Enqueue("b", "b", "t.export", jobs(4))),
        caps=(Cap(1, queue="exports", phases=("b",)),),
    ),
    Case(
        "max_attempts raised",
        a=app("a", t_flaky={"queue": Q, "max_attempts": 2}),
        b=app("b", t_flaky={"queue": Q, "max_attempts": 5}),
        # A's jobs keep their 2 attempts when B runs them; B's get 5
        # (in flight on A, then run out by B, whose kind says 5)
        jobs=(Enqueue("a", "a", "t.flaky", in_flight(1), max_attempts=2),
              Enqueue("a", "a", "t.flaky", in_flight(1, fail_below=3), expect=FAILED,
                      max_attempts=2),
              Enqueue("b", "ab", "t.flaky", jobs(1, fail_below=3), max_attempts=5),
              Enqueue("b", "b", "t.flaky", jobs(2, fail_below=4), max_attempts=5)),
    ),
    Case(
        "unique key changed",
        a=app("a", t_u={"queue": Q, "unique": BY_KEY}),
        b=app("b", t_u={"queue": Q, "unique": BY_KEY_TENANT}),
        # A's running job holds A's key; B computes another, so its first enqueue inserts
        # beside it (at most two jobs of those args, docs/operating.md), then dedupes
        jobs=(Enqueue("a", "a", "t.u", in_flight(1, key=1, tenant=1), distinct=1,
                      inserted=1),
              Enqueue("a", "ab", "t.u", jobs(1, key=1, tenant=1), inserted=0),
              Enqueue("b", "ab", "t.u", jobs(2, 0.5, key=1, tenant=1), distinct=1,
                      inserted=1),
              Enqueue("b", "b", "t.u", jobs(2, 0.5, key=1, tenant=2), distinct=1,
                      inserted=1)),
    ),
    Case(
        "rate limit added",
        a=app("a", t_r={"queue": Q}),
        b=app("b", t_r={"queue": Q, "rate_limit": RATE_B}),
        # A's jobs carry no rate key and run as enqueued; B's are admitted at B's rate
        jobs=(Enqueue("a", "a", "t.r", in_flight(1) + jobs(3)),
              Enqueue("b", "b", "t.r", jobs(6, 0.05))),
        rates=(Rate("t.r", RATE_B, since="b"),),
    ),
    Case(
        "rate limit removed",
        a=app("a", t_r={"queue": Q, "rate_limit": RATE_B}),
        b=app("b", t_r={"queue": Q}),
        # A's backlog waits for admission under A's rate when A stops: it must still run
        jobs=(Enqueue("a", "a", "t.r", in_flight(1) + jobs(8, 0.05)),
              Enqueue("a", "ab", "t.r", jobs(2, 0.05)),
              Enqueue("b", "b", "t.r", jobs(3, 0.05))),
    ),
    Case(
        "timeout lowered",
        a=app("a", t_slow={"queue": Q, "timeout": 5, "max_attempts": 1}),
        b=app("b", t_slow={"queue": Q, "timeout": 0.4, "max_attempts": 1}),
        # A's jobs keep A's timeout when B runs them (in flight on A, handed back);
        # B's own run under B's and time out
        jobs=(Enqueue("a", "a", "t.slow", jobs(2, 0.8, in_flight=True) + jobs(1, 0.8)),
              Enqueue("b", "b", "t.slow", jobs(1, 0.8), expect=FAILED),
              Enqueue("b", "b", "t.slow", jobs(2, 0.1))),
    ),
    Case(
        "concurrency max raised",
        a=app("a", t_sync={"queue": Q, "concurrency": PER_TENANT}),
        b=app("b", t_sync={"queue": Q, "concurrency": PER_TENANT_2}),
        # A's backlog (its key row at max 1) runs two at a time once B's servers run
        # alone: B's adopter resizes the key (no enqueue of B's writes the row here)
        jobs=(Enqueue("a", "a", "t.sync", in_flight(1, tenant=1) + jobs(8, 0.3, tenant=1)),),
        caps=(Cap(2, kind="t.sync", by="tenant", phases=("b",)),),
        at_once=(AtOnce(2, kind="t.sync"),),
    ),
    Case(
        "concurrency key changed",
        a=app("a", t_sync={"queue": Q, "concurrency": ONE_AT_A_TIME}),
        b=app("b", t_sync={"queue": Q, "concurrency": PER_TENANT}),
        # A's backlog, one for the whole kind, is rekeyed per tenant as B starts: one per
        # tenant, the tenants side by side. A's job in flight then (B runs it for 1s once
        # A hands it back, which B may claim before A's stop returns: the cap counts from
        # "ab", where only A's execution of it started in "a" is left out) keeps A's key,
        # so it would run beside its tenant's next job: the pool that claims it rekeys it
        # and hands it back instead (kiln._server._misfiled)
        jobs=(Enqueue("a", "a", "t.sync", jobs(1, 1.0, in_flight=True, tenant=1)
                      + jobs(2, 0.3, tenant=1) + jobs(2, 0.3, tenant=2)),
              Enqueue("b", "b", "t.sync", jobs(2, 0.3, tenant=1) + jobs(2, 0.3, tenant=2))),
        caps=(Cap(1, kind="t.sync", by="tenant", phases=("ab", "b")),),
        at_once=(AtOnce(2, kind="t.sync"),),
    ),
]
