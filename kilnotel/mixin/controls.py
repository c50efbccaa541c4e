"""The alerting rules about queue controls (alerts/kiln.rules.yml, group kiln.controls):
a queue paused in an incident (``kiln queues pause``) and forgotten there."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert, paused
from kilnotel.mixin.config import Config


def controls(c: Config) -> list[Rule]:
    w = c.where
    seconds = c.threshold("queue_paused_seconds")
    for_ = f"{seconds / 60:g}m" if seconds >= 60 else f"{seconds:g}s"
    return [
        alert(c, "KilnQueuePausedTooLong", paused(c), "warning",
              f"Queue {{{{ $labels.queue }}}} of {w} has been paused for more than {for_}",
              f"""Queue {{{{ $labels.queue }}}} of {w} has been paused for more than {for_}:
              its servers claim none of its jobs, which pile up (enqueueing still works).
              If the incident that called for the pause is over, resume it with
              `kiln queues resume {{{{ $labels.queue }}}}`; `kiln queues` says since when
              and by whom it is paused.""", for_),
    ]
