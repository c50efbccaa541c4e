"""Live proof of the dashboards and alerts: real kiln workers, real Prometheus.

Two kiln deployments share the Prometheus, as staging and production would: namespace
``prod`` (servers A and B, on a PostgreSQL test schema) and namespace ``staging`` (server
C on a schema of its own, with 40 kinds over 10 queues, plus worker D, whose endpoint is
scraped and then closed: a worker that died). Each server is observed by kilnotel on its
own registry and served on 127.0.0.1 (one scrape target each, as worker processes would be):

- B serves queue ``handback``, takes a long job and is stopped: the job is handed back.
  Its endpoint stays up, as the last scrape of a stopped worker would.
- A serves ``default`` and the rate-limited ``limited``, under a steady, bounded load of
  jobs that complete, jobs that retry and then fail for good, and rate-limited jobs
  that wait for admission. Before it starts, a running job is claimed by a registered
  server that never sends a heartbeat: A, as leader, rescues it after dead_after. Then
  A's heartbeats are made to fail (the store's ``server_heartbeat`` raises, as when the
  database is unreachable) until A fences itself; it rejoins once they pass again.

- C serves q0..q9 and runs one job of each of its 40 kinds: no series may overflow,
  and q9's completions must be its own.

Prometheus (Debian's binary) scrapes every target every second and evaluates the shipped rule
files every second. The test requires that every query of every dashboard panel, with
Grafana's variables substituted ($queue and $kind by ``.*``, $__rate_interval by 15s),
succeeds with a non-empty result holding a finite value, and shows the workload's
activity at some point of the run; that every template variable lists values; that
every rule evaluates without error; and that KilnJobsFailed fires, with the other
alerts the workload provokes (KilnJobsRescued; KilnQueueStalled, KilnNoServerAlive and
KilnJobsUnhandled for the queue nobody serves any more; KilnWorkerDown for staging's
dead target), each in its own deployment, and not
KilnQueueStalled where jobs complete, KilnSeveralLeaders for the two deployments' two
leaders, KilnNoServerAlive or KilnJobsUnhandled for a served queue, or KilnMetricsOverflow
anywhere.

The alert rules are used as shipped except for ``for:``, which this test sets to 0s in
its temporary copy: the shipped durations (5 minutes for KilnJobsFailed) would outlast
the test, and promtool's unit tests (alerts/tests) already check them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import kiln
import kilnotel
from tests.ops import promql
from tests.ops.prometheus import Prometheus
from tests.ops.workload import (
    DEAD_SERVER,
    FAST,
    STAGING_QUEUES,
    STEADY,
    claim_as_dead_server,
    enqueue_steadily,
    fence_once,
    fence_while_running,
    hand_back_one_job,
    make_app,
    many_kinds_app,
    pause_briefly,
    run_every_staging_kind,
    run_server,
    stop_server,
)
from tests.plugins.databases import postgres_schema_url
from tests.support.binaries import binary
from tests.support.waits import wait_for

CHECK_TIMEOUT = 45.0  # for every panel query together, once the workload has run
# Panel queries whose every value may be 0 during the run: results are written within
# milliseconds, and the 5 ms jobs are rarely running at the instant of a scrape.
MAY_STAY_ZERO = {"Results pending [A]", "Running vs concurrency [A]",
                 "Telemetry errors [A]", "Telemetry errors [B]",  # kilnotel is fine here
                 "Stuck handlers [A]", "Stuck handlers [B]",  # no stuck handler either
                 # the results path works and the kinds agree: nothing to show
                 *(f"Results path problems [{r}]" for r in "ABCD"),
                 "Results failing [A]", "Jobs reconciled [A]", "Kind conflicts [A]",
                 # every claim is well within the latency SLO's 30 s
                 "Claim latency budget burn rate [A]", "Claim latency budget burn rate [B]"}

pytestmark = pytest.mark.parametrize("database_backend", ["postgres"])


def live_rules(workdir: Path) -> list[Path]:
    """The shipped rule files, with every alert's ``for:`` set to 0s."""
    out = []
    for source in promql.RULE_FILES:
        data = yaml.safe_load(source.read_text(encoding="utf-8"))
        for group in data["groups"]:
            for rule in group["rules"]:
                if "alert" in rule:
                    rule["for"] = "0s"
        target = workdir / source.name
        target.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        out.append(target)
    return out


# -------------------------------------------------------------------------- checks
def finite(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(s["value"][1])) for s in result)


async def poll(check: Callable[[], Awaitable[bool]], deadline: float) -> bool:
    while True:
        if await check():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.5)


async def check_panels(prom: Prometheus, deadline: float) -> list[str]:
    """Panel queries that never returned a finite value before ``deadline``."""
    failures = []
    last: dict[str, Any] = {}
    for query in promql.panel_queries():
        expr = promql.substitute(query.expr)

        async def answered(expr: str = expr, label: str = query.label) -> bool:
            last[label] = await asyncio.to_thread(prom.query, expr)
            return finite(last[label])

        if not await poll(answered, deadline):
            failures.append(f"{query.label}: {expr} -> {last.get(query.label)}")
        else:  # shown with -s, or when the test fails
            values = [s["value"][1] for s in last[query.label]]
            print(f"{query.label}: {len(values)} series {values[:4]}")
    return failures


async def check_panels_saw_activity(prom: Prometheus, since: float) -> list[str]:
    """Panel queries that stayed at 0 (or NaN) over the whole run: a panel that charts
    rescues must have shown a rescue, one that charts fences a fence, and the hand-back
    panel B's one hand-back (kilnotel exports every counter at 0 from observe(), so even
    a first and only increase shows).
    """
    idle = []
    deadline = time.monotonic() + 5  # the last events of the workload may await a scrape
    for query in promql.panel_queries():
        if query.label.split(": ", 1)[1] in MAY_STAY_ZERO:
            continue
        expr = promql.substitute(query.expr)
        values: list[float] = []

        async def active(expr: str = expr, values: list[float] = values) -> bool:
            matrix = await asyncio.to_thread(prom.query_range, expr, since, time.time())
            values[:] = [float(v) for series in matrix for _t, v in series["values"]]
            return any(math.isfinite(v) and v != 0 for v in values)

        if not await poll(active, deadline):
            idle.append(f"{query.label}: {expr} stayed at {set(values)}")
    return idle


async def check_counters_born_at_zero(prom: Prometheus, since: float) -> list[str]:
    """Counter series of the panels whose first scrape was already above 0: their first
    increase is invisible to increase() and rate(). Every server-side counter starts at
    0 (its label sets are the servers' queues and kinds); the exceptions are the
    enqueue counter of the App's clients, which starts at the first enqueue of each
    kind, and histograms, whose series start at their first observation."""
    names = sorted({name for query in promql.panel_queries()
                    for name in promql.metric_names(query.expr)
                    if name.endswith("_total")} - {"kiln_jobs_enqueued_total"})
    late = []
    for name in names:
        matrix = await asyncio.to_thread(prom.query_range, name, since, time.time())
        for series in matrix:
            first = float(series["values"][0][1])
            if first > 0:
                late.append(f"{name}{series['metric']} first scraped at {first}")
    return late


async def check_variables(prom: Prometheus) -> None:
    for path in promql.DASHBOARDS:
        for name, selector, label in promql.variable_queries(promql.dashboard(path)):
            values = await asyncio.to_thread(
                prom.api, f"label/{label}/values", **{"match[]": promql.substitute(selector)})
            assert values, f"variable {name} lists nothing"
            if name == "queue":
                assert {"default", "limited", "handback", *STAGING_QUEUES} <= set(values)
            if name == "namespace":
                assert {"prod", "staging"} <= set(values), values
            if name == "kind":
                assert {"ok", "flaky", "limited"} <= set(values), values


async def check_rules_healthy(prom: Prometheus) -> None:
    data = await asyncio.to_thread(prom.api, "rules")
    rules = [r for g in data["groups"] for r in g["rules"]]
    assert len(rules) == len(list(promql.rules()))
    broken = [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"]
    assert broken == []


async def installations(prom: Prometheus) -> dict[str, str]:
    """installation -> the namespace of the targets that export it."""
    info = await asyncio.to_thread(prom.query, 'kiln_build_info{kiln_installation!=""}')
    return {s["metric"]["kiln_installation"]: s["metric"]["namespace"] for s in info}


async def firing_alerts(prom: Prometheus) -> set[tuple[str, str, str]]:
    """(alertname, namespace, queue or instance or "") of every firing alert. Alerts
    about a deployment's jobs carry its installation, not the namespace of one of its
    targets: the namespace is read from the targets that export that installation."""
    namespaces = await installations(prom)
    data = await asyncio.to_thread(prom.api, "alerts")
    return {(a["labels"]["alertname"],
             a["labels"].get("namespace")
             or namespaces.get(a["labels"].get("kiln_installation", ""), ""),
             a["labels"].get("queue") or a["labels"].get("instance") or "")
            for a in data["alerts"] if a["state"] == "firing"}


async def check_alerts(prom: Prometheus, dead_target: str) -> None:
    """The workload's events fire their alerts (``for`` is 0s here), and only where due."""
    expected = {
        ("KilnJobsFailed", "prod", "default"),  # flaky jobs out of attempts
        ("KilnFailedJobsPresent", "prod", "default"),
        ("KilnQueueStalled", "prod", "handback"),  # its handed-back job waits, unserved
        ("KilnNoServerAlive", "prod", "handback"),  # ... and no live server serves it
        ("KilnJobsUnhandled", "prod", "handback"),  # ... nor handles its kind
        ("KilnJobsRescued", "prod", "default"),
        ("KilnWorkerDown", "staging", dead_target),
    }
    firing: set[tuple[str, str, str]] = set()

    async def fired() -> bool:
        firing.update(await firing_alerts(prom))
        return expected <= firing

    assert await poll(fired, time.monotonic() + 15), (expected - firing, firing)
    assert ("KilnQueueStalled", "prod", "default") not in firing  # jobs complete there
    assert ("KilnQueueStalled", "prod", "limited") not in firing
    never = {"KilnNoServerAlive", "KilnJobsUnhandled", "KilnSeveralLeaders",
             "KilnMetricsOverflow"}
    assert [f for f in firing - expected
            if f[0] in never or (f[1] == "staging" and f[0] != "KilnWorkerDown")] == []
    data = await asyncio.to_thread(prom.api, "alerts")
    namespaces = await installations(prom)
    failed = [a for a in data["alerts"] if a["labels"]["alertname"] == "KilnJobsFailed"
              and a["labels"]["queue"] == "default"
              and namespaces.get(a["labels"].get("kiln_installation", "")) == "prod"]
    assert failed and failed[0]["labels"]["severity"] == "warning"
    assert float(failed[0]["value"]) >= 1
    assert failed[0]["annotations"]["runbook_url"] == "docs/runbooks.md#kilnjobsfailed"


# ---------------------------------------------------------------------------- test
@contextlib.asynccontextmanager
async def workers(
    app: kiln.App, staging: kiln.App
) -> AsyncIterator[tuple[list[kiln.Server], dict[str, list[str]], kilnotel.MetricsServer]]:
    """Servers A (observed with the app's enqueues) and B of prod, C and D of staging,
    each with its /metrics, and D's endpoint. D never runs: the test closes its
    endpoint once scraped, so its target is a kiln worker that died."""
    provider_a, _registry = kilnotel.prometheus_provider()
    kilnotel.observe_app(app, provider_a, traces=False)
    a = app.server({"default": 4, "limited": 2}, kiln.ServerConfig(**FAST))
    b = app.server({"handback": 1}, kiln.ServerConfig(**FAST))
    # staging's servers have no timing to show: a calmer heartbeat, so a moment of load
    # on the 2-core machine does not fence them (CI: KilnServerFenced for staging's C)
    c = staging.server(STAGING_QUEUES, kiln.ServerConfig(**STEADY))
    d = staging.server({"q0": 1}, kiln.ServerConfig(**STEADY))  # runs before C, then dies
    providers = [provider_a, *(kilnotel.prometheus_provider()[0] for _ in range(3))]
    endpoints = [kilnotel.serve(kilnotel.observe(s, p, counts_ttl=1.0, sizes_ttl=1.0,
                                                 traces=False), port=0)
                 for s, p in zip((a, b, c, d), providers, strict=True)]
    targets = [f"127.0.0.1:{e.port}" for e in endpoints]
    try:
        yield [a, b, c, d], {"prod": targets[:2], "staging": targets[2:]}, endpoints[3]
    finally:
        for endpoint in endpoints:
            endpoint.close()


async def worker_dies(prom: Prometheus, server: kiln.Server, endpoint: kilnotel.MetricsServer,
                      target: str) -> None:
    """``server`` runs until Prometheus has scraped its installation (the label its
    kiln_build_info carries once a heartbeat confirmed it), then stops and its endpoint
    closes: the target of a kiln worker that died."""
    task = await run_server(server)
    known = f'kiln_build_info{{instance="{target}", kiln_installation!=""}}'

    async def seen() -> bool:
        return bool(await asyncio.to_thread(prom.query, known))

    assert await poll(seen, time.monotonic() + 15), "the dying worker's installation"
    await stop_server(server, task)
    endpoint.close()


async def scraped(prom: Prometheus, targets: int) -> bool:
    return len(await asyncio.to_thread(prom.query, "up == 1")) == targets


async def check_staging(prom: Prometheus) -> None:
    """40 kinds x 10 queues on one worker: no overflow series, q9 counts as q9."""
    overflow = await asyncio.to_thread(prom.query, '{otel_metric_overflow="true"}')
    assert overflow == []
    q9 = 'kiln_jobs_finished_total{namespace="staging", queue="q9", outcome="completed"}'

    async def counted() -> bool:
        result = await asyncio.to_thread(prom.query, f"sum({q9})")
        return bool(result) and float(result[0]["value"][1]) == 4

    assert await poll(counted, time.monotonic() + 15), "q9's four completions"


async def run_workload(app: kiln.App, admin: Any, a: kiln.Server, b: kiln.Server,
                       stop: asyncio.Event) -> tuple[asyncio.Task[None], asyncio.Task[int]]:
    """Hand-back on B, then A under load: a rescue, a pause, two fences, a second
    rescue."""
    await hand_back_one_job(app, b)
    rescued_job = await claim_as_dead_server(admin, app)
    task_a = await run_server(a)
    load = asyncio.create_task(enqueue_steadily(app, stop))
    # the leader waits dead_after + heartbeat_interval before its first rescue
    await wait_for(lambda: a.stats().rescued >= 1, 25, "the dead server's job rescued")
    row = await admin.job_get(rescued_job)
    assert row is not None and row.server_id != DEAD_SERVER
    await pause_briefly(admin, a)
    fenced_job = await fence_while_running(app, admin, a)
    await asyncio.sleep(2.5)  # two scrapes, so the second fence shows as an increase
    await fence_once(a)
    # the job cancelled by the first fence ran under a registration now silent
    await wait_for(lambda: a.stats().rescued >= 2, 30, "the fenced job rescued")
    row = await admin.job_get(fenced_job)
    assert row is not None and row.rescues >= 1, row
    return task_a, load


@contextlib.asynccontextmanager
async def staging_app() -> AsyncIterator[kiln.App]:
    """The staging deployment's app, on a PostgreSQL schema of its own (its own leader)."""
    schema = postgres_schema_url()
    app = many_kinds_app(next(schema))
    await app.amigrate()
    try:
        yield app
    finally:
        next(schema, None)  # drops the schema


async def test_panels_and_failed_jobs_alert_against_real_prometheus(
    store_url: str, tmp_path: Path
) -> None:
    prometheus_binary = binary("prometheus", "apt-get install prometheus")
    app = make_app(store_url)
    await app.amigrate()
    admin = app.new_store()
    await admin.open()
    stop = asyncio.Event()
    async with staging_app() as staging, workers(app, staging) as ([a, b, c, d], targets, dying):
        prom = Prometheus(prometheus_binary, tmp_path, targets, live_rules(tmp_path))
        tasks: tuple[asyncio.Task[None], asyncio.Task[int]] | None = None
        task_c: asyncio.Task[None] | None = None
        try:
            await asyncio.to_thread(prom.wait_ready)
            since = time.time()
            every = sum(map(len, targets.values()))
            assert await poll(lambda: scraped(prom, every), time.monotonic() + 10)
            await worker_dies(prom, d, dying, targets["staging"][1])
            assert await poll(lambda: scraped(prom, every - 1), time.monotonic() + 10)
            task_c = await run_server(c)
            await run_every_staging_kind(staging)
            tasks = await run_workload(app, admin, a, b, stop)

            failures = await check_panels(prom, time.monotonic() + CHECK_TIMEOUT)
            assert failures == [], "\n".join(failures)
            idle = await check_panels_saw_activity(prom, since)
            assert idle == [], "\n".join(idle)
            late = await check_counters_born_at_zero(prom, since)
            assert late == [], "\n".join(late)
            await check_variables(prom)
            await check_rules_healthy(prom)
            await check_staging(prom)

            await check_alerts(prom, targets["staging"][1])
        except BaseException:
            print(prom.log())
            raise
        finally:
            stop.set()
            if tasks is not None:
                await asyncio.wait_for(tasks[1], 10)
                await stop_server(a, tasks[0])
            if task_c is not None:
                await stop_server(c, task_c)
            prom.close()
            await admin.close()
