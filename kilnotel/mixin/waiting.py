"""The alerting rules about jobs that wait on something nobody will do (alerts/kiln.rules.yml,
group kiln.waiting): rate keys without a declared limit, rate keys whose backlog does not
drain at their rate, and dependents the sweeper had to release."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config


def below_rate(c: Config) -> str:
    """Per rate key: its starts per second over its configured rate (0 when no worker
    reports starts of it), where it is more than ``rate_limit_lag_seconds`` behind."""
    by = c.by_and("rate_key")
    rate = f"max by ({by}) ({c.v('kiln_rate_limit_rate')})"
    started = f"sum by ({by}) ({c.over('rate', 'kiln_rate_limit_started_total', '10m')})"
    lag = f"max by ({by}) ({c.v('kiln_rate_limit_lag_seconds')})"
    return (f"(\n  ({started}\n   or 0 * {rate})\n  / {rate}\n)"
            f" < {c.threshold('rate_limit_drain_ratio'):g}\n"
            f"and on ({by})\n{lag} > {c.threshold('rate_limit_lag_seconds'):g}\n")


def waiting(c: Config) -> list[Rule]:
    w = c.where
    return [
        # Jobs of a key without a declared rate limit are never admitted: a typo in a
        # rate_key, or the service that declares it (the one with the handlers) is gone.
        alert(c, "KilnRateKeysUndeclared",
              f"max by ({c.by}) ({c.v('kiln_rate_keys_undeclared')}) > 0", "warning",
              f"{{{{ $value }}}} rate keys of {w} have pending jobs and no declared rate limit",
              f"""For 10 minutes, {{{{ $value }}}} rate keys of {w} have had pending jobs that
              no kind and no enqueue declared a rate limit for. Their jobs are never admitted,
              so they wait for ever; the workers' log names each key (kiln.admitter).""",
              "10m"),
        # A rate key's backlog does not go at its configured rate: its workers are too few
        # or too slow, its queue is paused or unserved, or admission falls behind. (A
        # backlog that grows because jobs come faster than the rate is the limit at work:
        # it starts at its rate, and this stays quiet.)
        alert(c, "KilnRateLimitBelowRate", below_rate(c), "warning",
              f"Rate key {{{{ $labels.rate_key }}}} of {w} drains its backlog at "
              f"{{{{ $value | humanizePercentage }}}} of its rate",
              f"""For 15 minutes, rate key {{{{ $labels.rate_key }}}} of {w} has had more
              than {c.threshold('rate_limit_lag_seconds'):g} seconds of its configured rate
              waiting for admission, and its jobs started at {{{{ $value | humanizePercentage
              }}}} of that rate. Its backlog cannot drain at its rate: the workers of its
              queue are too few or too slow, the queue is paused or no live worker serves
              it, or admission falls behind.""",
              "15m"),
        # Available jobs no live server handles in their queue: their kind was enqueued
        # before any server declared it, or a deploy moved it to another queue or removed it.
        alert(c, "KilnJobsUnhandled",
              f"max by ({c.by_and('queue', 'kiln_job_kind')}) "
              f"({c.v('kiln_jobs_unhandled')}) > 0", "warning",
              f"{{{{ $value }}}} jobs of kind {{{{ $labels.kiln_job_kind }}}} wait in queue "
              f"{{{{ $labels.queue }}}} of {w}, where no live server handles them",
              f"""For 10 minutes, {{{{ $value }}}} available jobs of kind
              {{{{ $labels.kiln_job_kind }}}} in queue {{{{ $labels.queue }}}} of {w} have had no
              live server that handles their kind in that queue. Either no server of the kind
              has started yet (its jobs follow its declaration once one does), or a deploy
              moved the kind to another queue or removed it; `kiln kinds` lists them.""",
              "10m"),
        # The sweeper released awaiting jobs whose dependencies were all completed or gone:
        # they were saved, but some release was missed.
        alert(c, "KilnJobsStranded",
              f"sum by ({c.by_and('queue')}) "
              f"({c.over('increase', 'kiln_jobs_stranded_total', '1h')}) > 0", "info",
              f"The sweeper released stranded dependents of queue {{{{ $labels.queue }}}} "
              f"of {w}",
              f"""In the last hour the leader's sweeper released about {{{{ $value }}}} awaiting
              jobs of queue {{{{ $labels.queue }}}} of {w} whose dependencies were all
              completed or no longer existed. They run now, but nothing else would have
              released them: find out what removed their dependencies."""),
    ]
