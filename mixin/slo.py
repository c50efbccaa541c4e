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
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mixin.alerts import Rule, alert
from mixin.config import Config, LatencySLO, _num, _quote

PERIOD_DAYS = 30
# (severity, ((long window, short window, burn rate), ...)) for the two alerts of an SLO
PAGE = (("1h", "5m", 14.4), ("6h", "30m", 6.0))
TICKET = (("1d", "2h", 3.0), ("3d", "6h", 1.0))
WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")

FAILURES = "queue_kind:kiln_job_failures:ratio_rate"
LATENCY_MISSES = "queue:kiln_claim_latency_slo_misses:ratio_rate"


# ---------------------------------------------------------------------- recording
def _failures(c: Config, window: str) -> str:
    by = c.by_and("queue", "kiln_job_kind")

    def rate(name: str, outcome: str) -> str:
        return f"sum by ({by}) (rate({c.m(name, outcome)}[{window}]))"

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
        bucket = c.m("kiln_claim_latency_seconds_bucket", ", ".join(p for p in (le, matcher) if p))
        count = c.m("kiln_claim_latency_seconds_count", matcher)
        parts.append(f"1 - (\n  sum by ({by}) (rate({bucket}[{window}]))\n  /\n"
                     f"  sum by ({by}) (rate({count}[{window}]))\n)")
    if len(parts) == 1:
        return parts[0] + "\n"
    return "\n" + "\nor\n".join(f"({p})" for p in parts) + "\n"


def recording(c: Config) -> list[Rule]:
    return [
        *({"record": f"{FAILURES}{w}", "expr": _failures(c, w)} for w in WINDOWS),
        *({"record": f"{LATENCY_MISSES}{w}", "expr": _latency_misses(c, w)} for w in WINDOWS),
    ]


# ------------------------------------------------------------------------- alerts
def kind_groups(c: Config) -> list[tuple[str, float]]:
    overrides = dict(sorted(c.kind_failure_objectives.items()))
    if not overrides:
        return [("", c.failure_objective)]
    others = "|".join(re.escape(k) for k in overrides)
    return [(f"kiln_job_kind!~{_quote(others)}", c.failure_objective),
            *((f"kiln_job_kind={_quote(k)}", o) for k, o in overrides.items())]


def burning(series: str, groups: Iterable[tuple[str, float]],
            windows: tuple[tuple[str, str, float], ...]) -> str:
    """Each group (matcher, objective) over each window pair: long and short window both
    above ``burn rate x budget``; the ``or`` of all of them."""
    parts = []
    for matcher, objective in groups:
        sel = f"{{{matcher}}}" if matcher else ""
        budget = 1 - objective
        for long, short, rate in windows:
            limit = _num(round(rate * budget, 10))
            parts.append(f"  {series}{long}{sel} > {limit}\n"
                         f"  and\n  {series}{short}{sel} > {limit}\n")
    return "or\n".join(f"(\n{p})\n" for p in parts)


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
    return [
        alert(c, "KilnJobFailureBudgetBurning",
              burning(FAILURES, failure_groups, PAGE), "critical",
              f"Jobs of {kind} burn their failure budget fast",
              f"""{{{{ $value | humanizePercentage }}}} of the jobs of {kind} failed for good
              over the last hour (or six hours), at least 6 times what the kind's failure
              budget allows (objective: {_objective_text(c)}): at this rate the whole
              monthly budget is gone within days."""),
        alert(c, "KilnJobFailureBudgetSlowBurn",
              burning(FAILURES, failure_groups, TICKET), "warning",
              f"Jobs of {kind} burn their failure budget",
              f"""{{{{ $value | humanizePercentage }}}} of the jobs of {kind} failed for good
              over the last day (or three days), more than the kind's failure budget allows
              (objective: {_objective_text(c)}): kept up, it spends the monthly budget
              before the month ends."""),
        alert(c, "KilnClaimLatencyBudgetBurning",
              burning(LATENCY_MISSES, queue_groups, PAGE), "critical",
              f"Claims in {queue} miss their latency objective fast",
              f"""{{{{ $value | humanizePercentage }}}} of the jobs claimed in {queue} waited
              longer than the queue's latency threshold over the last hour (or six hours),
              at least 6 times what its latency budget allows (objective:
              {_latency_text(c)})."""),
        alert(c, "KilnClaimLatencyBudgetSlowBurn",
              burning(LATENCY_MISSES, queue_groups, TICKET), "warning",
              f"Claims in {queue} miss their latency objective",
              f"""{{{{ $value | humanizePercentage }}}} of the jobs claimed in {queue} waited
              longer than the queue's latency threshold over the last day (or three days),
              more than its latency budget allows (objective: {_latency_text(c)})."""),
    ]
