"""The alerting rules about handlers kiln gave up on (alerts/kiln.rules.yml, group
kiln.handlers): a plain def handler cannot be interrupted, so past its timeout (or a
fence, or a shutdown) kiln ends its attempt but the thread goes on and keeps its slot."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config


def handlers(c: Config) -> list[Rule]:
    w = c.where
    stuck = c.m("kiln_server_handlers_stuck")
    return [
        alert(c, "KilnHandlersStuck",
              f"max by ({c.by_and('instance', 'queue')}) ({c.joined(stuck)}) > 0", "warning",
              f"{{{{ $value }}}} stuck handlers hold slots of queue {{{{ $labels.queue }}}} on "
              f"{{{{ $labels.instance }}}} of {w}",
              f"""{{{{ $value }}}} handlers of queue {{{{ $labels.queue }}}} on the kiln server at
              {{{{ $labels.instance }}}} of {w} have gone on running for 15 minutes after kiln
              gave up on their attempt (timeout, shutdown or fence). Each keeps a slot taken
              until it returns, so the queue runs with less concurrency, and its job may run
              twice.""", "15m"),
        alert(c, "KilnQueueSlotsStuck",
              c.joined(f"{stuck} >= {c.m('kiln_server_concurrency')} and {stuck} > 0"),
              "critical",
              f"Every slot of queue {{{{ $labels.queue }}}} on {{{{ $labels.instance }}}} of "
              f"{w} is held by a stuck handler",
              f"""All the slots of queue {{{{ $labels.queue }}}} on the kiln server at
              {{{{ $labels.instance }}}} of {w} have been held for 5 minutes by handlers that
              went on running after kiln gave up on their attempt. That server runs nothing
              more of the queue until they return, and reports unhealthy.""", "5m"),
    ]
