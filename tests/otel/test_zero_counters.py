"""Counters exist at 0 from observe() on, so Prometheus sees the first increase of each."""

from __future__ import annotations

import re
from typing import Any

from prometheus_client import generate_latest

import kiln
import kiln.events
import kilnotel
from kilnotel import names as n
from tests.support.otel import Running, Telemetry, fast_config
from tests.support.waits import wait_for

QUEUES = {"default": 2, "long": 1}


def _series(points: dict[str, list[Any]], metric: n.Metric) -> dict[tuple[str, ...], float]:
    """Values of ``metric`` keyed by its attribute values, in the metric's attribute order."""
    return {
        tuple(str(p.attributes[a]) for a in metric.attributes): p.value
        for p in points.get(metric.name, [])
    }


async def test_every_known_label_set_starts_at_zero_and_the_first_event_counts_from_it(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry
) -> None:
    server = app.server(QUEUES, fast_config(shutdown_timeout=0.3, kill_grace=0.2))
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    before = telemetry.collect()  # the server has not run: nothing happened yet

    pairs = {(q, k) for q in QUEUES for k in app.kinds}
    assert _series(before, n.SERVER_FENCED) == {(): 0}
    assert _series(before, n.SERVER_HEARTBEAT_FAILURES) == {(): 0}
    assert _series(before, n.SERVER_LEADER_CHANGES) == {("gained",): 0, ("lost",): 0}
    assert _series(before, n.DB_ERRORS) == {(op,): 0 for op in n.DB_OPERATIONS}
    for metric in (n.JOBS_CLAIMED, n.JOBS_RETRIED, n.JOBS_HANDED_BACK):
        assert _series(before, metric) == dict.fromkeys(pairs, 0), metric.name
    assert _series(before, n.JOBS_FINISHED) == {
        (q, k, o): 0 for q, k in pairs for o in n.OUTCOMES}
    assert _series(before, n.JOBS_RESCUED) == {
        (q, k, o): 0 for q, k in pairs for o in ("retry", "failed")}
    for metric in (n.CLAIM_LATENCY, n.JOB_DURATION):  # histograms start at their first job
        assert metric.name not in before

    started: list[kiln.events.Event] = []
    server.events.subscribe(
        lambda e: started.append(e) if isinstance(e, kiln.events.JobStarted) else None)
    running = Running(server)
    await running.started()
    await client.enqueue("long", {"seconds": 30}, queue="long")

    async def in_handler() -> bool:
        return bool(started)

    await wait_for(in_handler, 10, "the long job started")
    await running.stop()  # hands the job back
    after = telemetry.collect()
    handed_back = _series(after, n.JOBS_HANDED_BACK)
    assert handed_back.pop(("long", "long")) == 1
    assert set(handed_back.values()) == {0} and len(handed_back) == len(pairs) - 1
    finished = _series(after, n.JOBS_FINISHED)
    assert finished[("long", "long", "handed_back")] == 1
    assert finished[("long", "long", "completed")] == 0
    assert _series(after, n.SERVER_FENCED) == {(): 0}


def test_the_prometheus_endpoint_shows_the_zeros_before_any_event(app: kiln.App) -> None:
    server = app.server(QUEUES, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False)
    text = generate_latest(registry).decode()
    provider.shutdown()

    def value(name: str, **labels: str) -> float:
        found = []
        for line in text.splitlines():
            if line.startswith(name + "{") and all(
                f'{k}="{v}"' in line for k, v in labels.items()
            ):
                found.append(float(line.rsplit(" ", 1)[1]))
        assert len(found) == 1, (name, labels, found)
        return found[0]

    assert value("kiln_jobs_handed_back_total", queue="long", kiln_job_kind="long") == 0
    assert value("kiln_jobs_rescued_total", queue="default", kiln_job_kind="ok",
                 outcome="failed") == 0
    assert value("kiln_jobs_finished_total", queue="default", kiln_job_kind="doomed",
                 outcome="failed") == 0
    assert value("kiln_server_fenced_total") == 0
    assert value("kiln_server_leader_changes_total", change="lost") == 0
    assert value("kiln_db_errors_total", operation="job_results_apply") == 0
    assert not re.search(r"^kiln_claim_latency_seconds_bucket", text, re.M)
