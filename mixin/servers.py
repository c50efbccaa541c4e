"""The alerting rules about workers, targets and kilnotel itself (alerts/kiln.rules.yml).

KilnNoServerAlive is per deployment: a deployment is known by its scrape targets
(``up``, which stays while a target is down) or by a health series seen within the last
hour (its targets may have vanished from service discovery), and it alerts unless one
of its workers reports healthy. Per-worker alerts carry ``instance`` and the deployment
labels as scraped.
"""

from __future__ import annotations

from mixin.alerts import Rule, alert
from mixin.config import Config


def servers(c: Config) -> list[Rule]:
    w, by = c.where, c.by
    healthy = c.m("kiln_server_healthy")
    known = (f"group by ({by}) ({c.m('up')})\n"
             f"or\ngroup by ({by}) (last_over_time({healthy}[1h]))")
    return [
        alert(c, "KilnNoServerAlive",
              f"(\n{known}\n)\nunless on ({by})\n(max by ({by}) ({healthy}) == 1)\n",
              "critical", f"No healthy kiln server is reporting in {w}",
              f"""No scraped kiln worker of {w} reports itself healthy: none is running or
              reachable, or every one is fenced, stale or behind on its results. Nothing is
              claiming this deployment's jobs.""", "2m"),
        alert(c, "KilnWorkerDown", f"{c.m('up')} == 0", "warning",
              f"kiln worker {{{{ $labels.instance }}}} of {w} cannot be scraped",
              f"""Prometheus has failed to scrape the kiln worker at {{{{ $labels.instance }}}}
              of {w} for 5 minutes: the process is gone, hung or unreachable, and none of its
              own series (health included) is current.""", "5m"),
        alert(c, "KilnServerUnhealthy", f"{healthy} == 0", "warning",
              f"kiln server {{{{ $labels.instance }}}} of {w} is unhealthy",
              f"""The kiln server at {{{{ $labels.instance }}}} of {w} has reported unhealthy for
              5 minutes: fenced off, heartbeat stale, results piling up, or not running.""",
              "5m"),
        alert(c, "KilnServerFenced",
              f"increase({c.m('kiln_server_fenced_total')}[10m]) > 0", "warning",
              f"kiln server {{{{ $labels.instance }}}} of {w} fenced itself off",
              f"""The kiln server at {{{{ $labels.instance }}}} of {w} could not confirm its
              heartbeat and fenced itself off in the last 10 minutes: it cancelled its running
              jobs, which other servers rescue after dead_after."""),
        alert(c, "KilnNoLeader", "kiln:leaders:sum == 0", "critical",
              f"No kiln server of {w} holds the leader lease",
              f"""None of the scraped kiln servers of {w} has held the leader lease for 5
              minutes: recurring jobs are not enqueued, jobs of dead servers are not rescued,
              nothing is pruned, and the database-wide counts are not published.""", "5m"),
        alert(c, "KilnSeveralLeaders", "kiln:leaders:sum > 1", "warning",
              f"{{{{ $value }}}} kiln servers of {w} believe they are the leader",
              f"""{{{{ $value }}}} scraped kiln servers of {w} report holding the leader lease
              at once, for 5 minutes. One lease row allows one leader per database: the
              servers may use different databases under one deployment label, or a leader
              keeps its belief after losing the lease.""", "5m"),
        alert(c, "KilnLeaderFlapping",
              f"sum by ({by}) (increase("
              f"{c.m('kiln_server_leader_changes_total', 'change=' + chr(34) + 'gained' + chr(34))}"
              f"[15m])) > {c.threshold('leader_changes_15m'):g}", "warning",
              f'The kiln leader of {w} changed {{{{ $value | printf "%.0f" }}}} times in 15 '
              f"minutes",
              f"""Leadership in {w} changed hands {{{{ $value | printf "%.0f" }}}} times in the
              last 15 minutes. Each new leader waits dead_after + heartbeat_interval before its
              first rescue, so flapping delays rescues and recurring jobs.""", "5m"),
        *_results_and_errors(c),
    ]


def _results_and_errors(c: Config) -> list[Rule]:
    w = c.where
    return [
        alert(c, "KilnResultsPilingUp",
              f"{c.m('kiln_server_results_pending')} > {c.threshold('results_pending'):g}",
              "warning",
              f"{{{{ $value }}}} results of kiln server {{{{ $labels.instance }}}} of {w} are "
              f"not written",
              f"""The kiln server at {{{{ $labels.instance }}}} of {w} holds {{{{ $value }}}}
              results it has not written to the database, for 5 minutes: the database is slow
              or failing writes. Claiming slows down past results_max_pending.""", "5m"),
        alert(c, "KilnDatabaseErrors",
              f"sum by ({c.by_and('instance', 'operation')}) "
              f"(rate({c.m('kiln_db_errors_total')}[5m])) > "
              f"{c.threshold('db_errors_per_second'):g}", "warning",
              f"kiln server {{{{ $labels.instance }}}} of {w} gets database errors on "
              f"{{{{ $labels.operation }}}}",
              f"""Store operation {{{{ $labels.operation }}}} fails
              {{{{ $value | printf "%.2f" }}}} times per second on the kiln server at
              {{{{ $labels.instance }}}} of {w} (more than one a minute for 5 minutes).""",
              "5m"),
        alert(c, "KilnNotifierDown", f"{c.m('kiln_notifier_up')} == 0", "info",
              f"The notification channel of kiln server {{{{ $labels.instance }}}} of {w} is "
              f"down",
              f"""The LISTEN connection or bus of the kiln server at {{{{ $labels.instance }}}}
              of {w} has been down for 10 minutes. The server falls back to polling: jobs still
              run, with up to poll_interval of extra latency and more queries.""", "10m"),
        alert(c, "KilnEventSubscriberErrors",
              f"increase({c.m('kiln_events_subscriber_errors_total')}[15m]) > 0", "info",
              f"Event subscribers of kiln server {{{{ $labels.instance }}}} of {w} raise",
              f"""Event subscribers of the kiln server at {{{{ $labels.instance }}}} of {w}
              raised {{{{ $value | printf "%.0f" }}}} exceptions in 15 minutes (caught and
              logged by the hub, jobs unaffected): the metrics or spans they feed miss those
              events."""),
        alert(c, "KilnEventsDropped", f"increase({c.m('kiln_events_dropped_total')}[15m]) > 0",
              "info", f"kiln server {{{{ $labels.instance }}}} of {w} drops events",
              f"""A queued event subscriber of the kiln server at {{{{ $labels.instance }}}} of
              {w} could not keep up and {{{{ $value | printf "%.0f" }}}} events were dropped in
              15 minutes."""),
    ]


def telemetry(c: Config) -> list[Rule]:
    w = c.where
    overflow = ", ".join(p for p in ('__name__=~"kiln_.+"', 'otel_metric_overflow="true"',
                                     c.selector) if p)
    return [
        alert(c, "KilnCountsStale",
              f"max by ({c.by_and('instance')}) ({c.m('kiln_counts_age_seconds')}) > "
              f"{c.threshold('counts_age_seconds'):g}", "warning",
              f"The job counts published by {{{{ $labels.instance }}}} of {w} are "
              f"{{{{ $value | humanizeDuration }}}} old",
              f"""The kiln worker at {{{{ $labels.instance }}}} of {w} publishes the
              database-wide job counts but has not read them for
              {{{{ $value | humanizeDuration }}}}: its counts queries fail or hang. Past
              counts_max_age it withdraws the counts, so backlog and stall alerts of this
              deployment see no data.""", "5m"),
        alert(c, "KilnMetricsOverflow",
              f"count by ({c.by_and('instance')}) ({{{overflow}}}) > 0", "warning",
              f"kiln worker {{{{ $labels.instance }}}} of {w} has more series than the "
              f"OpenTelemetry limit",
              f"""{{{{ $value }}}} kiln metrics of the worker at {{{{ $labels.instance }}}} of
              {w} passed the SDK's 2,000 series per instrument and fold the excess into one
              otel_metric_overflow series: some queues or kinds have no series of their own,
              and their panels and alerts are wrong.""", "15m"),
    ]
