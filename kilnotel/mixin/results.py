"""The alerting rules about the results path (alerts/kiln.rules.yml, group kiln.results):
results a server cannot write, a crashed results writer, results the database refused,
and jobs that reconciliation handed back."""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert
from kilnotel.mixin.config import Config


def results(c: Config) -> list[Rule]:
    return [
        # healthy() fails after two heartbeat intervals; this pages once it lasts.
        alert(c, "KilnResultsNotWritten",
              c.joined(f"{c.m('kiln_server_results_failing_seconds')} > 60"), "critical",
              f"kiln server {{{{ $labels.instance }}}} of {c.where} cannot write the results of "
              f"its jobs.",
              """Every write of results by the kiln server at {{ $labels.instance }} has failed
              for more than 3 minutes. Its jobs finish but stay running in the database; it
              reports unhealthy and slows its claiming once results_max_pending are waiting.""",
              "2m"),
        alert(c, "KilnResultsWriterCrashed",
              f"{c.over('increase', 'kiln_server_completer_crashes_total', '10m')} > 0", "warning",
              f"The results writer of kiln server {{{{ $labels.instance }}}} of {c.where} "
              f"crashed.",
              """The task that writes the results of the kiln server at {{ $labels.instance }}
              raised an unexpected error in the last 10 minutes. It was restarted and nothing
              was lost, but it is a bug in kiln or in the store: its log has the traceback."""),
        alert(c, "KilnResultsPoisoned",
              f"{c.over('increase', 'kiln_results_poisoned_total', '15m')} > 0", "warning",
              f"The database refused results of kiln server {{{{ $labels.instance }}}} of "
              f"{c.where}.",
              """The database refused the result of at least one job of the kiln server at
              {{ $labels.instance }} in the last 15 minutes while it accepted the others; each
              was written as a failed attempt whose error says why."""),
        alert(c, "KilnResultsDropped",
              f"{c.over('increase', 'kiln_results_dropped_total', '15m')} > 0", "warning",
              f"kiln server {{{{ $labels.instance }}}} of {c.where} dropped results it could "
              f"not write.",
              """At least one result of the kiln server at {{ $labels.instance }} could not be
              written at all, not even as a failed attempt, in the last 15 minutes. Its job
              is handed back by reconciliation and runs again."""),
        alert(c, "KilnJobsReconciled",
              f"sum by ({c.by_and('queue')}) "
              f"({c.over('increase', 'kiln_jobs_reconciled_total', '15m')}) > 0", "info",
              f"Jobs of queue {{{{ $labels.queue }}}} of {c.where} were reconciled",
              f"""Jobs of queue {{{{ $labels.queue }}}} of {c.where} were running under a live
              kiln server in the database but not on that server (a claim whose reply was
              lost, a result that applied nothing) in the last 15 minutes. They were handed
              back, or their result written again."""),
    ]
