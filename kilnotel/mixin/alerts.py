"""The alerting rules: alerts/kiln.rules.yml.

Every alert keeps the deployment labels of the config (an aggregation ``by`` them, or a
per-instance series that carries them), so two kiln deployments on one Prometheus are
alerted on separately; none uses a bare ``absent()``. Every alert carries severity
(critical: act now; warning: act today; info: look when convenient), summary,
description and a runbook_url under the config's base.
"""

from __future__ import annotations

from typing import Any

from kilnotel.mixin.config import AVAILABLE, Config

Rule = dict[str, Any]
Q_FAILED = '"failed"'


def alert(c: Config, name: str, expr: str, severity: str, summary: str, description: str,
          for_: str | None = None, labels: dict[str, str] | None = None) -> Rule:
    rule: Rule = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {}), **c.alert_extra_labels}
    rule["annotations"] = {"summary": summary, "description": " ".join(description.split()),
                           "runbook_url": c.runbook(name)}
    if c.dashboard_url is not None:
        rule["annotations"]["dashboard_url"] = c.dashboard_url
    rule["annotations"].update(c.alert_extra_annotations)
    return rule


def jobs(c: Config) -> list[Rule]:
    w = c.where
    by = c.by_and("queue", "kiln_job_kind")
    ran = (f"sum by ({by}) "
           f"({c.over('increase', 'kiln_jobs_finished_total', '15m', 'outcome=' + Q_FAILED)})")
    lost = (f"sum by ({by}) "
            f"({c.over('increase', 'kiln_jobs_rescued_total', '15m', 'outcome=' + Q_FAILED)})")
    # a sum of two counters either of which may be missing (a pair first seen at run time)
    failed_for_good = f"(\n  ({ran} + {lost})\n  or {ran}\n  or {lost}\n) > 0\n"
    return [
        alert(c, "KilnJobsFailed", failed_for_good, "warning",
              f"Jobs of kind {{{{ $labels.kiln_job_kind }}}} failed for good in queue "
              f"{{{{ $labels.queue }}}} of {w}",
              f"""{{{{ $value | printf "%.0f" }}}} jobs of kind {{{{ $labels.kiln_job_kind }}}}
              in queue {{{{ $labels.queue }}}} of {w} failed for good (out of attempts,
              failed permanently, or rescued with no attempt left) in the last 15 minutes.
              The alert resolves when no new job fails and fires again on the next ones."""),
        alert(c, "KilnFailedJobsPresent",
              "max without (state) (queue_state:kiln_jobs:max{state=\"failed\"}) > 0", "info",
              f"{{{{ $value }}}} failed jobs in queue {{{{ $labels.queue }}}} of {w}",
              f"""Queue {{{{ $labels.queue }}}} of {w} holds {{{{ $value }}}} jobs that ran
              out of attempts or failed permanently. They stay failed, and the jobs that
              depend on them stay awaiting, until someone requeues or deletes them.""",
              "30m"),
        alert(c, "KilnJobFailureRatioHigh",
              c.above("queue:kiln_attempt_failure_ratio:rate5m", "failure_ratio"), "warning",
              f"{{{{ $value | humanizePercentage }}}} of attempts fail in queue "
              f"{{{{ $labels.queue }}}} of {w}",
              f"""Over the last 5 minutes {{{{ $value | humanizePercentage }}}} of the attempts
              that ended in queue {{{{ $labels.queue }}}} of {w} failed (retried or failed for
              good), for 15 minutes in a row. Retries hide this until the jobs run out of
              attempts.""", "15m"),
        alert(c, "KilnJobsRescued",
              f"sum by ({c.by_and('queue')}) "
              f"({c.over('increase', 'kiln_jobs_rescued_total', '15m')}) > 0", "warning",
              f"Jobs of dead workers were rescued in queue {{{{ $labels.queue }}}} of {w}",
              f"""{{{{ $value | printf "%.0f" }}}} running jobs in queue {{{{ $labels.queue }}}}
              of {w} were rescued in the last 15 minutes: the workers running them stopped
              sending heartbeats (crash, OOM kill, kill before the grace period, lost
              network). Each rescue uses up an attempt."""),
    ]


def paused(c: Config) -> str:
    """The queues paused right now (``kiln queues pause``), by deployment and queue;
    every worker serving the queue reports it: ``max``."""
    return f"max by ({c.by_and('queue')}) ({c.v('kiln_queue_paused')}) == 1"


def busy(c: Config) -> str:
    """The queues whose workers run attempts, all younger than the queue's
    ``max_run_seconds``: long jobs keep them, they are not stalled."""
    by = c.by_and("queue")
    targets = ", ".join(c.target_labels)
    running = (f"{c.m('kiln_server_oldest_running_age_seconds')}\n"
               f"and on ({targets}, queue)\n{c.m('kiln_server_running')} > 0")
    return c.above(f"max by ({by}) ({c.joined(running)})", "max_run_seconds", "<")


def queues(c: Config) -> list[Rule]:
    w = c.where
    by = c.by_and("queue")
    available = AVAILABLE
    ended = c.over("rate", "kiln_jobs_finished_total", "10m", 'outcome!="handed_back"')
    progress = f"sum by ({by}) ({ended}) > 0"
    admitted = (f"sum by ({by}) "
                f"({c.over('rate', 'kiln_admission_delay_seconds_count', '10m')}) > 0")
    return [
        alert(c, "KilnQueueStalled",
              f"{available} > 0\nunless on ({by})\n({progress})\n"
              f"unless on ({by})\n({paused(c)})\nunless on ({by})\n({busy(c)})\n",
              "critical",
              f"Queue {{{{ $labels.queue }}}} of {w} has available jobs and nothing "
              f"completes.",
              f"""{{{{ $value }}}} jobs are available in queue {{{{ $labels.queue }}}} of {w}, yet
              no attempt has ended there for at least 10 minutes, and no worker runs one of
              its attempts younger than the queue's max_run_seconds
              ({_duration(c.threshold('max_run_seconds'))} by default): no worker serves the
              queue, the workers lack a handler for the jobs' kinds, or every slot is taken
              by jobs that never finish.""", "10m"),
        alert(c, "KilnQueueBacklogGrowing",
              f"{available} > 0\nand on ({by})\nderiv(queue_state:kiln_jobs:max"
              f"{{state=\"available\"}}[15m]) > 0\n", "warning",
              f"The backlog of queue {{{{ $labels.queue }}}} of {w} keeps growing",
              f"""The number of available jobs in queue {{{{ $labels.queue }}}} of {w} has been
              growing for 30 minutes (now {{{{ $value }}}}): jobs arrive faster than the
              workers finish them.""", "15m"),
        alert(c, "KilnOldestJobTooOld",
              c.above("queue:kiln_queue_oldest_available_age_seconds:max",
                      "oldest_available_seconds"), "warning",
              f"The oldest available job of queue {{{{ $labels.queue }}}} of {w} waits for "
              f"{{{{ $value | humanizeDuration }}}}",
              f"""A job in queue {{{{ $labels.queue }}}} of {w} has been ready to run for
              {{{{ $value | humanizeDuration }}}} without being claimed (more than the
              queue's threshold, {_duration(c.threshold('oldest_available_seconds'))} by
              default).""", "5m"),
        alert(c, "KilnClaimLatencyHigh",
              c.above("queue:kiln_claim_latency_seconds:p99_5m", "claim_latency_p99_seconds"),
              "warning",
              f"p99 claim latency of queue {{{{ $labels.queue }}}} of {w} is "
              f"{{{{ $value | humanizeDuration }}}}",
              f"""99% of the jobs claimed in queue {{{{ $labels.queue }}}} of {w} waited less
              than {{{{ $value | humanizeDuration }}}} between becoming ready and being
              claimed; the slowest 1% waited longer. Healthy workers claim within the poll
              interval.""", "10m"),
        alert(c, "KilnAdmissionFallingBehind",
              c.above("queue:kiln_admission_delay_seconds:p99_5m",
                      "admission_delay_p99_seconds"), "warning",
              f"Rate-limited jobs of queue {{{{ $labels.queue }}}} of {w} wait "
              f"{{{{ $value | humanizeDuration }}}} for admission",
              f"""The p99 delay between the creation and the admission of rate-limited jobs in
              queue {{{{ $labels.queue }}}} of {w} is {{{{ $value | humanizeDuration }}}}: jobs
              are enqueued faster than their rate limit admits them.""", "15m"),
        alert(c, "KilnAdmissionStalled",
              f'max without (state) (queue_state:kiln_jobs:max{{state="pending"}}) > 0\n'
              f"unless on ({by})\n({admitted})\n", "warning",
              f"{{{{ $value }}}} rate-limited jobs of queue {{{{ $labels.queue }}}} of {w} wait "
              f"and none is admitted",
              f"""{{{{ $value }}}} jobs in queue {{{{ $labels.queue }}}} of {w} wait for
              rate-limit admission and no job of the queue was admitted for at least 10
              minutes.""", "10m"),
    ]


def _duration(seconds: float) -> str:
    return f"{seconds / 60:g}m" if seconds >= 60 else f"{seconds:g}s"
