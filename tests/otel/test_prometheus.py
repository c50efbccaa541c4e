"""The real /metrics endpoint of a running worker, scraped over HTTP."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.metrics import Observation
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

import kiln
import kilnotel
from kilnotel import names as n
from tests.support.otel import count
from tests.support.waits import wait_for

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)", re.M)


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        return str(response.read().decode())


def _samples(text: str, name: str) -> list[tuple[str, float]]:
    return [(m.group(2) or "", float(m.group(3))) for m in SAMPLE.finditer(text)
            if m.group(1) == name]


@pytest.fixture
def worker_port(store_url: str, client: kiln.Client) -> Iterator[int]:
    """A worker process on the database that ``client`` has migrated; yields its port."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.otel.worker", store_url],
        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY "), f"worker did not start: {line!r}"
        yield int(line.split()[1])
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
            proc.stdout.close()


async def test_scrape_finds_failed_jobs_and_claim_latency_buckets(
    worker_port: int, client: kiln.Client
) -> None:
    ids = [await client.enqueue("doomed", {}) for _ in range(3)]
    ids += [await client.enqueue("ok", {}) for _ in range(4)]

    async def settled() -> bool:
        return await count(client, "failed", ids) + await count(client, "completed", ids) == 7

    await wait_for(settled, 30, "jobs settled")
    in_db = await count(client, "failed")
    assert in_db == 3
    text = ""
    began = time.monotonic()
    while time.monotonic() - began < 20:  # the counts cache refreshes every 5 s
        text = await asyncio.to_thread(_scrape, worker_port)
        if _failed(text) == in_db:
            break
        await asyncio.sleep(0.2)
    assert _failed(text) == in_db, _samples(text, "kiln_jobs_failed")
    assert ("", 0.0) not in _samples(text, "kiln_jobs_failed")  # always by queue
    assert _value(text, "kiln_jobs_failed", 'queue="idle"') == 0.0  # zero-filled
    buckets = _samples(text, "kiln_claim_latency_seconds_bucket")
    assert any('le="0.005"' in labels for labels, _ in buckets)
    assert any('le="3600.0"' in labels for labels, _ in buckets)
    infinite = [v for labels, v in buckets if 'le="+Inf"' in labels
                and 'kiln_job_kind="ok"' in labels]
    assert infinite == [4.0]
    assert _value(text, "kiln_jobs_finished_total", 'outcome="failed"') == 3.0
    assert _value(text, "kiln_server_healthy", "") == 1.0
    exposed = {m.group(1) for m in SAMPLE.finditer(text)} - {"target_info"}
    unknown = exposed - n.prometheus_names()
    assert not unknown, f"exposed but not in the names module: {unknown}"
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, text=True,
                               capture_output=True, timeout=30)
        assert check.returncode == 0, check.stdout + check.stderr


def _value(text: str, name: str, label: str) -> float:
    values = [v for labels, v in _samples(text, name) if label in labels]
    assert values, (name, label)
    return sum(values)


def _failed(text: str) -> float:
    return sum(v for labels, v in _samples(text, "kiln_jobs_failed") if 'queue="default"' in labels)


def test_serve_uses_its_own_registry_never_the_global_one() -> None:
    before = generate_latest(REGISTRY)
    provider, registry = kilnotel.prometheus_provider()
    assert registry is not REGISTRY
    meter = provider.get_meter("kilnotel")
    meter.create_observable_gauge(
        n.JOBS_FAILED.name, callbacks=[lambda o: [Observation(7, {n.QUEUE: "q"})]],
        unit=n.JOBS_FAILED.unit,
    )
    metrics = kilnotel.serve(registry, port=0)
    try:
        assert metrics.host == "127.0.0.1" and metrics.port > 0
        text = _scrape(metrics.port)
    finally:
        metrics.close()
        provider.shutdown()
    assert _samples(text, "kiln_jobs_failed")[0][1] == 7.0
    assert b"kiln_jobs_failed" not in generate_latest(REGISTRY)
    assert generate_latest(REGISTRY).count(b"\n# HELP") <= before.count(b"\n# HELP") + 1


def test_serve_refuses_an_observer_without_a_prometheus_reader(app: kiln.App) -> None:
    from opentelemetry.sdk.metrics import MeterProvider

    server = app.server({"default": 1})
    observer = kilnotel.observe(server, MeterProvider(), traces=False)
    with pytest.raises(ValueError, match="no Prometheus reader"):
        kilnotel.serve(observer, port=0)
    with pytest.raises(TypeError):
        kilnotel.serve(CollectorRegistry, port=0)  # type: ignore[arg-type]


def test_the_service_is_named_kiln_worker_unless_the_environment_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """target_info said unknown_service:python on the Prometheus path (L-10)."""
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    provider, registry = kilnotel.prometheus_provider()
    provider.get_meter("t").create_counter("t.c").add(1)
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert 'service_name="kiln-worker"' in text
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mail-workers")
    provider, registry = kilnotel.prometheus_provider()
    provider.get_meter("t").create_counter("t.c").add(1)
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert 'service_name="mail-workers"' in text
