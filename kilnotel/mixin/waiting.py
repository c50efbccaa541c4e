"""The alerting rules about jobs that wait on something nobody will do (alerts/kiln.rules.yml,
group kiln.waiting): rate keys without a declared limit, and dependents the sweeper had to
release."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config


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
