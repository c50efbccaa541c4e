"""OTLP export: kiln's real metrics and spans arrive at an OTLP/HTTP receiver on loopback,
from ``kilnotel.export_otlp`` and from ``kiln worker --otlp-endpoint``, and the standard
OTEL_EXPORTER_OTLP_* variables apply."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import kiln
import kilnotel
from kiln.cli.metrics import otlp_requested
from tests.otel.otlp_receiver import Receiver, attributes, receiver
from tests.support.config import fast_env
from tests.support.otel import Running, count, fast_config
from tests.support.waits import wait_for, wait_for_sync

CONSUMER = 5  # opentelemetry.proto.trace.v1.Span.SPAN_KIND_CONSUMER
STATUS_ERROR = 2  # Status.STATUS_CODE_ERROR


@pytest.fixture
def otlp() -> Iterator[Receiver]:
    yield from receiver()


@pytest.fixture
def quick_export(monkeypatch: pytest.MonkeyPatch) -> None:
    """Metrics exported every 200 ms, spans batched for 100 ms (the SDK reads these)."""
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    for name in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_PROTOCOL",
                 "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER"):
        monkeypatch.delenv(name, raising=False)


def _number(point: Any) -> float:
    return float(point.as_int if point.WhichOneof("value") == "as_int" else point.as_double)


def _total(otlp: Receiver, metric: str, **attrs: Any) -> float:
    """The latest cumulative value of ``metric`` (summed over matching series)."""
    latest: dict[tuple[tuple[str, Any], ...], Any] = {}
    for point in otlp.latest(metric, **attrs):
        key = tuple(sorted(attributes(point.attributes).items()))
        if key not in latest or point.time_unix_nano >= latest[key].time_unix_nano:
            latest[key] = point
    return sum(_number(p) for p in latest.values())


def _process_spans(otlp: Receiver) -> list[tuple[dict[str, Any], Any]]:
    return [(r, s) for r, s in otlp.span_list() if s.name == "process default"]


async def test_export_otlp_sends_real_metrics_and_spans(
    app: kiln.App, client: kiln.Client, otlp: Receiver, quick_export: None
) -> None:
    server = app.server({"default": 2}, fast_config())
    export = kilnotel.export_otlp(server, otlp.url)
    running = Running(server)
    await running.started()
    ok = [await client.enqueue("ok", {}) for _ in range(3)]
    doomed = await client.enqueue("doomed", {})  # 2 attempts, then failed for good

    async def done() -> bool:
        return (await count(client, "completed", ok) == 3
                and await count(client, "failed", [doomed]) == 1)

    await wait_for(done, 20, "jobs done")
    await wait_for(lambda: _async(len(_process_spans(otlp)) >= 5), 10, "5 spans exported")
    # the server's gauges are read while it runs (a stopped server reports none): wait for
    # a periodic export to carry one rather than hope one fell inside a short run
    await wait_for(lambda: _async(bool(otlp.latest("kiln.server.healthy"))), 10,
                   "the server gauge exported")
    await running.stop()
    await export.aclose()  # exports the last metrics

    spans = _process_spans(otlp)
    assert len(spans) == 5
    resource = spans[0][0]
    assert resource["service.name"] == "kiln-worker"
    by_job: dict[str, list[Any]] = {}
    for _resource, span in spans:
        attrs = attributes(span.attributes)
        assert span.kind == CONSUMER
        assert attrs["messaging.system"] == "kiln"
        assert attrs["messaging.destination.name"] == "default"
        by_job.setdefault(attrs["messaging.message.id"], []).append((attrs, span))
    assert set(by_job) == {str(i) for i in [*ok, doomed]}
    for attrs, span in by_job[str(doomed)]:
        assert attrs["kiln.job.kind"] == "doomed"
        assert attrs["error.type"] == "ValueError"
        assert span.status.code == STATUS_ERROR
    assert sorted(a["kiln.job.outcome"] for a, _s in by_job[str(doomed)]) == ["failed", "retry"]

    assert _total(otlp, "kiln.jobs.finished", kiln_job_kind="ok", outcome="completed") == 3
    assert _total(otlp, "kiln.jobs.finished", kiln_job_kind="doomed", outcome="failed") == 1
    assert _total(otlp, "kiln.jobs.claimed", queue="default") == 5
    durations = otlp.latest("kiln.job.duration", kiln_job_kind="ok", outcome="completed")
    assert durations and max(p.count for p in durations) == 3
    assert max(_number(p) for p in otlp.latest("kiln.server.healthy")) == 1


async def _async(value: bool) -> bool:
    return value


@pytest.mark.parametrize("database_backend", ["sqlite"])
async def test_the_standard_environment_variables_apply(
    app: kiln.App, client: kiln.Client, otlp: Receiver, quick_export: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.url)  # base URL: /v1/... added
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=kiln-tests")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "mail-workers")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    assert otlp_requested(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url})
    server = app.server({"default": 1}, fast_config())
    export = kilnotel.export_otlp(server)
    running = Running(server)
    await running.started()
    job = await client.enqueue("ok", {})
    await wait_for(lambda: _async(len(_process_spans(otlp)) == 1), 20, "the span")
    await running.stop()
    await export.aclose()

    (resource, span), = _process_spans(otlp)
    assert attributes(span.attributes)["messaging.message.id"] == str(job)
    assert resource["service.name"] == "mail-workers"
    assert resource["deployment.environment"] == "test"
    assert {"/v1/traces", "/v1/metrics"} <= set(otlp.paths)
    assert all(h.get("x-tenant") == "kiln-tests" for h in otlp.headers)
    assert all(h.get("Content-Encoding") == "gzip" for h in otlp.headers)
    assert _total(otlp, "kiln.jobs.finished", kiln_job_kind="ok", outcome="completed") == 1


def test_signals_can_be_turned_off_and_bad_settings_are_refused(
    monkeypatch: pytest.MonkeyPatch, quick_export: None
) -> None:
    meters, tracer = kilnotel.otlp_providers(
        "http://127.0.0.1:9", environ={"OTEL_TRACES_EXPORTER": "none"})
    assert tracer is None
    meters.shutdown(timeout_millis=100)
    with pytest.raises(kilnotel.OtlpConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='http/json'"):
        kilnotel.otlp_providers(environ={"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})
    with pytest.raises(kilnotel.OtlpConfigError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        kilnotel.otlp_providers(environ={"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"})
    with pytest.raises(kilnotel.OtlpConfigError, match="endpoint is empty"):
        kilnotel.otlp_providers(" ")
    if importlib.util.find_spec("opentelemetry.exporter.otlp.proto.grpc") is None:
        with pytest.raises(kilnotel.OtlpConfigError,
                           match="pip install opentelemetry-exporter-otlp-proto-grpc"):
            kilnotel.otlp_providers(environ={"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert not otlp_requested(None, {})
    assert not otlp_requested(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4318",
                                     "OTEL_SDK_DISABLED": "true"})
    assert otlp_requested(None, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://x:4318/v1/traces"})
    assert otlp_requested("http://x:4318", {})


# kiln worker --otlp-endpoint ---------------------------------------------------------------
APP = '''
import kiln
from opentelemetry import trace

app = kiln.App()

@app.job("ok")
def ok(job):
    with trace.get_tracer("otlpapp").start_as_current_span("send the mail"):
        return None
'''
FAST_ENV = {**fast_env(shutdown_timeout=0.5),
            "OTEL_METRIC_EXPORT_INTERVAL": "200", "OTEL_BSP_SCHEDULE_DELAY": "100"}


def _cli(project: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("KILN_", "OTEL_"))}
    return subprocess.Popen([sys.executable, "-m", "kiln.cli", *args], cwd=project,
                            env={**base, **FAST_ENV, **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("database_backend", ["sqlite"])
def test_kiln_worker_exports_over_otlp_and_serves_metrics(
    store_url: str, tmp_path: Path, otlp: Receiver
) -> None:
    (tmp_path / "otlpapp.py").write_text(APP)
    env = {"KILN_DATABASE_URL": store_url}
    for command in (["migrate"], ["enqueue", "ok"]):
        done = _cli(tmp_path, *command, **env)
        _out, err = done.communicate(timeout=60)
        assert done.returncode == 0, err
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # every attempt traced (the default is a tenth of those whose request was not)
    worker = _cli(tmp_path, "worker", "otlpapp:app", "--otlp-endpoint", otlp.url,
                  "--metrics-port", str(port), "--trace-sample-ratio", "1", **env)
    try:
        wait_for_sync(lambda: len(_process_spans(otlp)) == 1, 30, "the attempt's span")
        wait_for_sync(lambda: len(otlp.span_list()) == 2, 10, "the handler's span")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            scraped = r.read().decode()
        assert 'kiln_jobs_finished_total{' in scraped and 'outcome="completed"' in scraped
        worker.terminate()
        _out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate(timeout=10)
    assert worker.returncode == 0, err
    assert f"OTLP export to {otlp.url}" in err
    assert _total(otlp, "kiln.jobs.finished", kiln_job_kind="ok", outcome="completed") == 1
    (resource, process), = _process_spans(otlp)
    assert resource["service.name"] == "kiln-worker"
    (child,) = [s for _r, s in otlp.span_list() if s.name == "send the mail"]
    assert child.trace_id == process.trace_id and child.parent_span_id == process.span_id


def test_kiln_worker_refuses_an_otlp_protocol_it_cannot_speak(tmp_path: Path) -> None:
    (tmp_path / "otlpapp.py").write_text(APP)
    worker = _cli(tmp_path, "worker", "otlpapp:app", "--otlp-endpoint", "http://127.0.0.1:9",
                  KILN_DATABASE_URL=f"sqlite:///{tmp_path}/k.db",
                  OTEL_EXPORTER_OTLP_PROTOCOL="http/json")
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 1, err
    assert "OTEL_EXPORTER_OTLP_PROTOCOL='http/json'" in err


def test_kiln_worker_without_kilnotel_says_what_to_install(tmp_path: Path) -> None:
    (tmp_path / "otlpapp.py").write_text(APP.replace("from opentelemetry import trace\n", ""))
    fake = tmp_path / "shadow" / "kilnotel"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'opentelemetry'\", name='opentelemetry')\n")
    worker = _cli(tmp_path, "worker", "otlpapp:app",
                  KILN_DATABASE_URL=f"sqlite:///{tmp_path}/k.db",
                  OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9",
                  PYTHONPATH=os.pathsep.join([str(tmp_path / "shadow"),
                                              os.environ.get("PYTHONPATH", "")]))
    _out, err = worker.communicate(timeout=60)
    assert worker.returncode == 1, err
    assert "OTLP export needs kilnotel" in err and "kiln-jobs[otel]" in err


def test_kiln_workers_sample_by_default_and_follow_the_producer() -> None:
    """kiln worker --otlp-endpoint: ParentBased(ProducerSampler(0.1)) unless
    OTEL_TRACES_SAMPLER is set; --trace-sample-ratio changes the ratio."""
    from opentelemetry.sdk.trace.sampling import ParentBased

    from kiln.cli.worker import _ratio
    from kilnotel import ProducerSampler, otlp_providers

    assert _ratio(None, {}) == 0.1 and _ratio(None, {"KILN_TRACE_SAMPLE_RATIO": "0.5"}) == 0.5
    assert _ratio(0.2, {"KILN_TRACE_SAMPLE_RATIO": "0.5"}) == 0.2
    with pytest.raises(kiln.ConfigError, match="between 0 and 1"):
        _ratio(2.0, {})
    env = {"OTEL_METRICS_EXPORTER": "none"}
    meter, tracer = otlp_providers("http://127.0.0.1:9", environ=env, sample_ratio=0.1)
    assert tracer is not None and isinstance(tracer.sampler, ParentBased)
    assert "ProducerSampler{0.1}" in str(tracer.sampler.get_description())  # type: ignore[no-untyped-call]
    tracer.shutdown()
    meter.shutdown()
    meter, tracer = otlp_providers("http://127.0.0.1:9", environ={
        **env, "OTEL_TRACES_SAMPLER": "always_on"}, sample_ratio=0.1)
    assert tracer is not None
    assert "ProducerSampler" not in str(tracer.sampler.get_description())
    tracer.shutdown()
    meter.shutdown()
    assert isinstance(ProducerSampler(0.1), ProducerSampler)
