"""Service level objectives: per-kind failure budgets and a queue-latency SLO, alerted on
with multiwindow, multi-burn-rate rules (the form of the Google SRE workbook, chapter
"Alerting on SLOs").

Two SLIs, each recorded over every window an alert needs (level:metric:operations):

- ``queue_kind:kiln_job_failures:ratio_rate<w>``: the share of the jobs of a kind that
  ended for good which failed for good: attempts with outcome ``failed`` plus rescues
  with no attempt left, over those plus completed attempts (retries, snoozes and
  cancellations are not an end for the budget). The objective is per kind
  (``Config.failure_objective``, overridden by ``kind_failure_objectives``);
- ``queue:kiln_claim_latency_slo_misses:ratio_rate<w>``: the share of claims that took
  longer than the queue's SLO threshold (``Config.latency_slo``, overridden per queue by
  ``queue_latency_slos``), read from the claim-latency histogram's bucket at that bound.

The budget is ``1 - objective`` over an SLO period of 30 days; a burn rate of 1 spends it
in exactly 30 days. Each SLO has two alerts, each the ``or`` of two window pairs, a long
window that makes it significant and a short one (1/12 of it) that resolves it soon after
the burn stops:

- ``...Burning`` (critical, page): 14.4x over 1h and 5m (2% of the budget in an hour), or
  6x over 6h and 30m (5% in six hours);
- ``...SlowBurn`` (warning, ticket): 3x over 1d and 2h, or 1x over 3d and 6h (10%).

Each window pair is a rule of its own, with a ``for:`` of its own (2m, 15m, 1h, 3h, as
kubernetes-mixin does) and ``long``/``short`` labels. A burn rate counts only once at
least ``slo_min_events`` jobs (or claims) ended in its long window: one failure of a
kind that runs twice an hour is a ticket at most, never a page. The latency page also
holds off while the queue recovers (its oldest available job getting younger): the
claims of a draining backlog miss the threshold by construction, after KilnQueueStalled
or KilnNoServerAlive paged for the outage itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config, LatencySLO, _num, _quote

FAILED = '"failed"'
ENDS = 'outcome=~"completed|failed"'

PERIOD_DAYS = 30
# (severity, ((long window, short window, burn rate), ...)) for the two alerts of an SLO
PAGE = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
TICKET = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

FAILURES = "queue_kind:kiln_job_failures:ratio_rate"
LATENCY_MISSES = "queue:kiln_claim_latency_slo_misses:ratio_rate"
# the volume of each long window: jobs of a kind that ended for good, claims of a queue
ENDED = "queue_kind:kiln_jobs_ended:increase"
CLAIMS = "queue:kiln_claims:increase"
FOR = {"1h": "2m", "6h": "15m", "1d": "1h", "3d": "3h"}  # per long window


# ---------------------------------------------------------------------- recording
def _failures(c: Config, window: str) -> str:
    by = c.by_and("queue", "kiln_job_kind")

    def rate(name: str, outcome: str) -> str:
        return f"sum by ({by}) ({c.over('rate', name, window, outcome)})"

    failed = rate("kiln_jobs_finished_total", 'outcome="failed"')
    ended = rate("kiln_jobs_finished_total", 'outcome=~"completed|failed"')
    lost = rate("kiln_jobs_rescued_total", 'outcome="failed"')
    # the rescue counter of a pair may be missing (first seen at run time): fall back
    return (f"(\n  ({failed} + {lost})\n  or {failed}\n)\n/\n"
            f"(\n  ({ended} + {lost})\n  or {ended}\n)\n")


def _le(seconds: float) -> str:
    """The ``le`` label of a bound, as either exposition writes it (``30``, ``30.0``)."""
    forms = dict.fromkeys((_num(seconds), repr(float(seconds))))
    return "|".join(re.escape(f).replace("\\", "\\\\") for f in forms)


def latency_groups(c: Config) -> list[tuple[str, LatencySLO]]:
    """(queue matcher, SLO): the default for every queue not overridden, then each
    overridden queue with its own."""
    overrides = dict(sorted(c.queue_latency_slos.items()))
    if not overrides:
        return [("", c.latency_slo)]
    others = "|".join(re.escape(q) for q in overrides)
    return [(f"queue!~{_quote(others)}", c.latency_slo),
            *((f"queue={_quote(q)}", slo) for q, slo in overrides.items())]


def _latency_misses(c: Config, window: str) -> str:
    by = c.by_and("queue")
    parts = []
    for matcher, slo in latency_groups(c):
        le = f'le=~"{_le(slo.seconds)}"'
        matchers = ", ".join(p for p in (le, matcher) if p)
        bucket = c.over("rate", "kiln_claim_latency_seconds_bucket", window, matchers)
        count = c.over("rate", "kiln_claim_latency_seconds_count", window, matcher)
        parts.append(f"1 - (\n  sum by ({by}) ({bucket})\n  /\n"
                     f"  sum by ({by}) ({count})\n)")
    if len(parts) == 1:
        return parts[0] + "\n"
    return "\n" + "\nor\n".join(f"({p})" for p in parts) + "\n"


def _ended(c: Config, window: str) -> str:
    by = c.by_and("queue", "kiln_job_kind")
    ended = (f"sum by ({by}) ({c.over('increase', 'kiln_jobs_finished_total', window, ENDS)})")
    lost = (f"sum by ({by}) ("
            f"{c.over('increase', 'kiln_jobs_rescued_total', window, 'outcome=' + FAILED)})")
    return f"({ended} + {lost})\nor\n{ended}\n"


def _claims(c: Config, window: str) -> str:
    return (f"sum by ({c.by_and('queue')}) "
            f"({c.over('increase', 'kiln_claim_latency_seconds_count', window)})")


def recording(c: Config) -> list[Rule]:
    return [
        *({"record": f"{FAILURES}{w}", "expr": _failures(c, w)} for w in WINDOWS),
        *({"record": f"{LATENCY_MISSES}{w}", "expr": _latency_misses(c, w)} for w in WINDOWS),
        *({"record": f"{ENDED}{w}", "expr": _ended(c, w)} for w in FOR),
        *({"record": f"{CLAIMS}{w}", "expr": _claims(c, w)} for w in FOR),
    ]


# ------------------------------------------------------------------------- alerts
def kind_groups(c: Config) -> list[tuple[str, float]]:
    overrides = dict(sorted(c.kind_failure_objectives.items()))
    if not overrides:
        return [("", c.failure_objective)]
    others = "|".join(re.escape(k) for k in overrides)
    return [(f"kiln_job_kind!~{_quote(others)}", c.failure_objective),
            *((f"kiln_job_kind={_quote(k)}", o) for k, o in overrides.items())]


def burning(series: str, groups: Iterable[tuple[str, float]], long: str, short: str,
            rate: float, volume: str, min_events: float, on: str) -> str:
    """Each group (matcher, objective) over one window pair: long and short window both
    above ``burn rate x budget``, and at least ``min_events`` in the long window's
    ``volume``; the ``or`` of the groups."""
    parts = []
    for matcher, objective in groups:
        sel = f"{{{matcher}}}" if matcher else ""
        limit = _num(round(rate * (1 - objective), 10))
        parts.append(f"  {series}{long}{sel} > {limit}\n"
                     f"  and\n  {series}{short}{sel} > {limit}\n"
                     f"  and on ({on})\n  {volume}{long}{sel} >= {_num(min_events)}\n")
    return "or\n".join(f"(\n{p})\n" for p in parts)


def _pairs(c: Config, name: str, severity: str, series: str, groups: list[tuple[str, float]],
           windows: tuple[tuple[str, str, float], ...], volume: str, on: str,
           summary: str, description: str, guard: str = "") -> list[Rule]:
    """One rule per window pair, each with its own ``for:`` and window labels."""
    rules = []
    for long, short, rate in windows:
        expr = burning(series, groups, long, short, rate, volume,
                       c.threshold("slo_min_events"), on)
        rules.append(alert(c, name, expr + guard, severity, summary, description,
                           FOR[long], {"long": long, "short": short}))
    return rules


def _objective_text(c: Config) -> str:
    text = f"{_num(c.failure_objective * 100)}% of its jobs succeed over {PERIOD_DAYS} days"
    return text + (", unless configured per kind" if c.kind_failure_objectives else "")


def _latency_text(c: Config) -> str:
    slo = c.latency_slo
    text = (f"{_num(slo.objective * 100)}% of claims within {_num(slo.seconds)}s over "
            f"{PERIOD_DAYS} days")
    return text + (", unless configured per queue" if c.queue_latency_slos else "")


def alerts(c: Config) -> list[Rule]:
    w = c.where
    kind = "kind {{ $labels.kiln_job_kind }} in queue {{ $labels.queue }} of " + w
    queue = "queue {{ $labels.queue }} of " + w
    failure_groups = kind_groups(c)
    queue_groups = [(m, x.objective) for m, x in latency_groups(c)]
    on_kind, on_queue = c.by_and("queue", "kiln_job_kind"), c.by_and("queue")
    events = _num(c.threshold("slo_min_events"))
    recovering = (f"unless on ({on_queue})\n"
                  f"deriv(queue:kiln_queue_oldest_available_age_seconds:max[10m]) < 0\n")
    return [
        *_pairs(c, "KilnJobFailureBudgetBurning", "critical", FAILURES, failure_groups, PAGE,
                ENDED, on_kind, f"Jobs of {kind} burn their failure budget fast.",
                f"""{{{{ $value | humanizePercentage }}}} of the jobs of {kind} failed for good
                over the window of this rule (label long: 1h or 6h), at least 6 times what
                the kind's failure budget allows (objective: {_objective_text(c)}), with at
                least {events} jobs ended in it: at this rate the whole monthly budget is
                gone within days."""),
        *_pairs(c, "KilnJobFailureBudgetSlowBurn", "warning", FAILURES, failure_groups, TICKET,
                ENDED, on_kind, f"Jobs of {kind} burn their failure budget.",
                f"""{{{{ $value | humanizePercentage }}}} of the jobs of {kind} failed for good
                over the window of this rule (label long: 1d or 3d), more than the kind's
                failure budget allows (objective: {_objective_text(c)}), with at least
                {events} jobs ended in it: kept up, it spends the monthly budget before the
                month ends."""),
        *_pairs(c, "KilnClaimLatencyBudgetBurning", "critical", LATENCY_MISSES, queue_groups,
                PAGE, CLAIMS, on_queue, f"Claims in {queue} miss their latency objective fast.",
                f"""{{{{ $value | humanizePercentage }}}} of the jobs claimed in {queue} waited
                longer than the queue's latency threshold over the window of this rule (label
                long: 1h or 6h), at least 6 times what its latency budget allows (objective:
                {_latency_text(c)}), with at least {events} claims in it, and the queue's
                oldest available job is not getting younger (a backlog draining after an
                outage does not page again).""", recovering),
        *_pairs(c, "KilnClaimLatencyBudgetSlowBurn", "warning", LATENCY_MISSES, queue_groups,
                TICKET, CLAIMS, on_queue, f"Claims in {queue} miss their latency objective.",
                f"""{{{{ $value | humanizePercentage }}}} of the jobs claimed in {queue} waited
                longer than the queue's latency threshold over the window of this rule (label
                long: 1d or 3d), more than its latency budget allows (objective:
                {_latency_text(c)}), with at least {events} claims in it."""),
    ]
