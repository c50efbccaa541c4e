"""The alerting rules about jobs that wait on something nobody will do (alerts/kiln.rules.yml,
group kiln.waiting): rate keys without a declared limit, and dependents the sweeper had to
release."""

from __future__ import annotations

from mixin.alerts import Rule, alert
from mixin.config import Config


def waiting(c: Config) -> list[Rule]:
    w = c.where
    return [
        # Jobs of a key without a declared rate limit are never admitted: a typo in a
        # rate_key, or the service that declares it (the one with the handlers) is gone.
        alert(c, "KilnRateKeysUndeclared",
              f"max by ({c.by}) ({c.m('kiln_rate_keys_undeclared')}) > 0", "warning",
              f"{{{{ $value }}}} rate keys of {w} have pending jobs and no declared rate limit",
              f"""For 10 minutes, {{{{ $value }}}} rate keys of {w} have had pending jobs that
              no kind and no enqueue declared a rate limit for. Their jobs are never admitted,
              so they wait for ever; the workers' log names each key (kiln.admitter).""",
              "10m"),
        # The sweeper released awaiting jobs whose dependencies were all completed or gone:
        # they were saved, but some release was missed.
        alert(c, "KilnJobsStranded",
              f"sum by ({c.by_and('queue')}) "
              f"(increase({c.m('kiln_jobs_stranded_total')}[1h])) > 0", "info",
              f"The sweeper released stranded dependents of queue {{{{ $labels.queue }}}} "
              f"of {w}",
              f"""In the last hour the leader's sweeper released about {{{{ $value }}}} awaiting
              jobs of queue {{{{ $labels.queue }}}} of {w} whose dependencies were all
              completed or no longer existed. They run now, but nothing else would have
              released them: find out what removed their dependencies."""),
    ]
