"""The alerting rules about workers, targets and kilnotel itself (alerts/kiln.rules.yml).

KilnNoServerAlive is per queue: work waits (available, or scheduled and due) and no live
server serves the queue, neither by the database's heartbeats (kiln exporter) nor as a
healthy scraped worker; so workers scaled to zero on an empty queue page nobody, and a
backlog with none pages at once. KilnQueueStateUnknown is per deployment: it was seen
within the hour and nothing publishes its queue counts any more (no scraped leader, no
exporter), so the queue alerts are blind. A kiln target is one that exported
``kiln_build_info``, whatever its job is called. Per-worker alerts carry ``instance``,
the target's own labels and the deployment's.
"""

from __future__ import annotations

from kilnotel.mixin.alerts import Rule, alert, paused
from kilnotel.mixin.config import INSTALLATION_INFO, Config

GAINED = 'change="gained"'


def servers(c: Config) -> list[Rule]:
    w, by = c.where, c.by
    by_queue = c.by_and("queue")
    healthy = c.m("kiln_server_healthy")
    known = f"group by ({by}) (last_over_time({INSTALLATION_INFO}[1h]))" if c.joins else (
        f"group by ({by}) (last_over_time({c.m('kiln_build_info')}[1h]))")
    published = f"group by ({by}) (queue_state:kiln_jobs:max)"
    return [
        alert(c, "KilnNoServerAlive",
              f"queue:kiln_jobs_waiting:max > 0\n"
              f"unless on ({by_queue})\n(queue:kiln_live_servers:max > 0)\n"
              f"unless on ({by_queue})\n(queue:kiln_healthy_workers:count > 0)\n"
              f"unless on ({by_queue})\n({paused(c)})\n",
              "critical",
              f"Jobs wait in queue {{{{ $labels.queue }}}} of {w} and no healthy server serves "
              f"it.",
              f"""{{{{ $value }}}} jobs are ready to run in queue {{{{ $labels.queue }}}} of {w}
              (available, or scheduled and due), and no live server serves the queue: none is
              registered with a fresh heartbeat (kiln exporter's view of the database) and no
              scraped worker serving it reports healthy. Nothing claims them. Workers scaled
              to zero with nothing waiting do not fire this.""", "5m"),
        alert(c, "KilnQueueStateUnknown",
              f"{known}\nunless on ({by})\n{published}\n", "critical",
              f"Nothing publishes the queue state of {w}.",
              f"""{w} reported within the last hour, but for 10 minutes neither a scraped
              leader nor kiln exporter has published its job counts: no worker runs (or none
              is scraped) and no exporter does, so whether jobs wait is unknown and every
              queue alert of this deployment is blind. Run kiln exporter to scale workers to
              zero without this page.""", "10m"),
        alert(c, "KilnWorkerDown", c.known_targets(f"{c.m('up')} == 0"), "warning",
              f"kiln worker {{{{ $labels.instance }}}} of {w} cannot be scraped.",
              f"""Prometheus has failed to scrape the kiln target at {{{{ $labels.instance }}}}
              of {w} for 5 minutes: the process is gone, hung or unreachable, and none of its
              own series (health included) is current. Only targets that exported
              kiln_build_info within the hour count, whatever their job is called.""", "5m"),
        alert(c, "KilnServerUnhealthy", c.joined(f"{healthy} == 0"), "warning",
              f"kiln server {{{{ $labels.instance }}}} of {w} is unhealthy",
              f"""The kiln server at {{{{ $labels.instance }}}} of {w} has reported unhealthy for
              5 minutes: fenced off, heartbeat stale, results piling up, or not running.""",
              "5m"),
        alert(c, "KilnServerFenced",
              f"{c.over('increase', 'kiln_server_fenced_total', '10m')} > 0", "warning",
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
              f"sum by ({by}) ("
              f"{c.over('increase', 'kiln_server_leader_changes_total', '15m', GAINED)}"
              f") > {c.threshold('leader_changes_15m'):g}", "warning",
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
              c.joined(f"{c.m('kiln_server_results_pending')} > "
                       f"{c.threshold('results_pending'):g}"),
              "warning",
              f"{{{{ $value }}}} results of kiln server {{{{ $labels.instance }}}} of {w} are "
              f"not written",
              f"""The kiln server at {{{{ $labels.instance }}}} of {w} holds {{{{ $value }}}}
              results it has not written to the database, for 5 minutes: the database is slow
              or failing writes. Claiming slows down past results_max_pending.""", "5m"),
        alert(c, "KilnDatabaseErrors",
              f"sum by ({c.by_and('instance', 'operation')}) "
              f"({c.over('rate', 'kiln_db_errors_total', '5m')}) > "
              f"{c.threshold('db_errors_per_second'):g}", "warning",
              f"kiln server {{{{ $labels.instance }}}} of {w} gets database errors on "
              f"{{{{ $labels.operation }}}}",
              f"""Store operation {{{{ $labels.operation }}}} fails
              {{{{ $value | printf "%.2f" }}}} times per second on the kiln server at
              {{{{ $labels.instance }}}} of {w} (more than one a minute for 5 minutes).""",
              "5m"),
        alert(c, "KilnNotifierDown", c.joined(f"{c.m('kiln_notifier_up')} == 0"), "info",
              f"The notification channel of kiln server {{{{ $labels.instance }}}} of {w} is "
              f"down",
              f"""The LISTEN connection or bus of the kiln server at {{{{ $labels.instance }}}}
              of {w} has been down for 10 minutes. The server falls back to polling: jobs still
              run, with up to poll_interval of extra latency and more queries.""", "10m"),
        alert(c, "KilnEventSubscriberErrors",
              f"{c.over('increase', 'kiln_events_subscriber_errors_total', '15m')} > 0",
              "info",
              f"Event subscribers of kiln server {{{{ $labels.instance }}}} of {w} raise",
              f"""Event subscribers of the kiln server at {{{{ $labels.instance }}}} of {w}
              raised {{{{ $value | printf "%.0f" }}}} exceptions in 15 minutes (caught and
              logged by the hub, jobs unaffected): the metrics or spans they feed miss those
              events."""),
        alert(c, "KilnEventsDropped",
              f"{c.over('increase', 'kiln_events_dropped_total', '15m')} > 0",
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
              f"max by ({c.by_and('instance')}) ({c.v('kiln_counts_age_seconds')}) > "
              f"{c.threshold('counts_age_seconds'):g}", "warning",
              f"The job counts published by {{{{ $labels.instance }}}} of {w} are "
              f"{{{{ $value | humanizeDuration }}}} old",
              f"""The kiln worker at {{{{ $labels.instance }}}} of {w} publishes the
              database-wide job counts but has not read them for
              {{{{ $value | humanizeDuration }}}}: its counts queries fail or hang. Past
              counts_max_age it withdraws the counts, so backlog and stall alerts of this
              deployment see no data.""", "5m"),
        alert(c, "KilnMetricsOverflow",
              f"count by ({c.by_and('instance')}) ({c.joined('{' + overflow + '}')}) > 0",
              "warning",
              f"kiln worker {{{{ $labels.instance }}}} of {w} has more series than the "
              f"OpenTelemetry limit",
              f"""{{{{ $value }}}} kiln metrics of the worker at {{{{ $labels.instance }}}} of
              {w} passed the SDK's 2,000 series per instrument and fold the excess into one
              otel_metric_overflow series: some queues or kinds have no series of their own,
              and their panels and alerts are wrong.""", "15m"),
    ]
