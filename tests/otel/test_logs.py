"""Log lines written under a job's handler name the job (id, kind, queue, attempt), in
plain def and async def handlers alike; ``kiln worker --log-format json`` writes one JSON
object per line; and kilnotel adds the trace and span ids of the attempt's span."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiln
import kilnotel
from kiln.logging import JobContextFilter, JsonFormatter, TextFormatter, TraceContextFilter
from tests.support.cli import cli_env, ok, run_cli
from tests.support.config import fast_env
from tests.support.otel import Running, Telemetry, count, fast_config
from tests.support.waits import wait_for

APP = '''
import logging
import kiln

app = kiln.App()
log = logging.getLogger("jobsapp")

@app.job("chatty")
async def chatty(job):
    log.warning("hello from job %s", job.id)
'''
FAST = fast_env(shutdown_timeout=None)


class Lines(logging.Handler):
    def __init__(self, formatter: logging.Formatter) -> None:
        super().__init__()
        self.addFilter(JobContextFilter())
        self.addFilter(kilnotel.TraceContextFilter())
        self.setFormatter(formatter)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def captured() -> Iterator[list[Lines]]:
    handlers = [Lines(JsonFormatter()), Lines(TextFormatter())]
    logger = logging.getLogger("tests.logs")
    logger.setLevel(logging.INFO)
    for h in handlers:
        logger.addHandler(h)
    yield handlers
    for h in handlers:
        logger.removeHandler(h)


async def test_lines_logged_by_handlers_carry_the_job_and_its_trace(
    app: kiln.App, client: kiln.Client, telemetry: Telemetry, captured: list[Lines]
) -> None:
    log = logging.getLogger("tests.logs")

    @app.job("logs_async")
    async def logs_async(job: kiln.Job) -> None:
        log.info("async line")

    @app.job("logs_sync")
    def logs_sync(job: kiln.Job) -> None:  # runs in a worker thread
        log.info("sync line")

    server = app.server({"default": 2}, fast_config())
    kilnotel.observe(server, telemetry.meter_provider, telemetry.tracer_provider)
    running = Running(server)
    await running.started()
    ids = [await client.enqueue("logs_async", {}), await client.enqueue("logs_sync", {})]

    async def done() -> bool:
        return await count(client, "completed", ids) == 2

    await wait_for(done, 20, "both jobs completed")
    await running.stop()
    log.info("outside any job")
    spans = {str(dict(s.attributes or {})["messaging.message.id"]): s
             for s in telemetry.spans() if s.name == "process default"}
    records = [json.loads(line) for line in captured[0].lines]
    by_message = {r["message"]: r for r in records}
    for message, job_id, kind in (("async line", ids[0], "logs_async"),
                                  ("sync line", ids[1], "logs_sync")):
        record = by_message[message]
        assert (record["job_id"], record["job_kind"], record["queue"], record["attempt"]) == (
            job_id, kind, "default", 1)
        context = spans[str(job_id)].context
        assert context is not None
        assert record["trace_id"] == f"{context.trace_id:032x}"
        assert record["span_id"] == f"{context.span_id:016x}"
        assert record["level"] == "info" and record["logger"] == "tests.logs"
    outside = by_message["outside any job"]
    assert "job_id" not in outside and "trace_id" not in outside
    text = [line for line in captured[1].lines if "sync line" in line and "async" not in line]
    assert len(text) == 1 and f"[job_id={ids[1]} job_kind=logs_sync queue=default attempt=1 " \
        "trace_id=" in text[0]


def test_kiln_worker_writes_json_lines_naming_the_job(store_url: str, tmp_path: Path) -> None:
    (tmp_path / "jobsapp.py").write_text(APP)
    ok(run_cli("migrate", "--database-url", store_url))
    job_id = int(ok(run_cli("--database-url", store_url, "enqueue", "chatty", cwd=tmp_path,
                            env=cli_env(PYTHONPATH=str(tmp_path)))))
    proc = subprocess.Popen(
        [sys.executable, "-m", "kiln.cli", "worker", "jobsapp:app", "--log-format", "json"],
        cwd=tmp_path, env=cli_env(KILN_DATABASE_URL=store_url, **FAST),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not any("hello from job" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        lines += rest.splitlines()
    records = [json.loads(line) for line in lines if line.strip()]  # every line is JSON
    (hello,) = [r for r in records if r["message"] == f"hello from job {job_id}"]
    assert hello["job_id"] == job_id and hello["job_kind"] == "chatty"
    assert hello["level"] == "warning" and hello["logger"] == "jobsapp"
    assert any(r["logger"].startswith("kiln") for r in records)
    assert proc.returncode == 0


def test_unknown_log_format_is_refused() -> None:
    from kiln._server._logs import formatter

    with pytest.raises(ValueError, match="'text' or 'json'"):
        formatter("xml")
    asyncio.run(asyncio.sleep(0))  # nothing left running


def test_the_json_formatter_keeps_extra_fields_and_says_whether_the_trace_is_sampled(
    telemetry: Telemetry,
) -> None:
    """L-9: users' extra= fields were dropped, and nothing said whether the trace of a
    line was exported at all."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    record = logging.LogRecord("app", logging.INFO, __file__, 1, "sent %s", ("x",), None)
    record.tenant = "acme"  # as logging does for extra={"tenant": "acme"}
    record.server_id = "vm-1"
    tracer = telemetry.tracer_provider.get_tracer("t")
    with tracer.start_as_current_span("request"):
        assert TraceContextFilter().filter(record)  # kiln.logging's, fed by kilnotel
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "sent x" and line["tenant"] == "acme"
    assert line["server_id"] == "vm-1" and line["trace_sampled"] is True
    assert len(line["trace_id"]) == 32 and len(line["span_id"]) == 16
    unsampled = logging.LogRecord("app", logging.INFO, __file__, 1, "m", (), None)
    with TracerProvider(sampler=ALWAYS_OFF).get_tracer("t").start_as_current_span("r"):
        kilnotel.TraceContextFilter().filter(unsampled)
    assert json.loads(JsonFormatter().format(unsampled))["trace_sampled"] is False
