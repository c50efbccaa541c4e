"""The series budget: a server with many kinds and queues stays under the SDK's limit.

40 kinds over 10 queues (4 declared on each), one server serving all of them: seeding
every queue x kind x outcome would be 2,400 series of kiln_jobs_finished_total, past the
SDK's 2,000, so the last queue's completions would fold into otel_metric_overflow.

400 declared kinds, 350 on "default" and 50 on "mail" (a monolith with hundreds of job
classes on a few queues): seeding each kind's own pair alone would be 2,400 series, so
seeding is capped at half of the limit, shared fairly between the queues, and every mail
completion still lands in its own series. The limit itself is a setting.
"""

from __future__ import annotations

import re

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from prometheus_client import generate_latest

import kiln
import kilnotel
from kilnotel import names as n
from kilnotel._cardinality import reader_options
from kilnotel._metrics import seed_pairs
from tests.support.otel import Running, count, fast_config
from tests.support.waits import wait_for

QUEUES = {f"q{i}": 1 for i in range(10)}
KINDS = [f"k{i:02d}" for i in range(40)]
SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def many_kinds_app(url: str) -> kiln.App:
    app = kiln.App(url)
    for i, name in enumerate(KINDS):
        async def handler(job: kiln.Job) -> None:
            return None

        app.job(name, queue=f"q{i % 10}")(handler)
    return app


def samples(text: str, family: str) -> list[dict[str, str]]:
    out = []
    for line in text.splitlines():
        match = SERIES.match(line)
        if match and match.group(1) == family:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2)))
            out.append({**labels, "__value__": match.group(3)})
    return out


def test_seeds_stay_within_the_budget() -> None:
    declared = {k: f"q{i % 10}" for i, k in enumerate(KINDS)}
    pairs = seed_pairs(QUEUES, declared)
    assert len(pairs) * len(n.OUTCOMES) <= n.SEED_BUDGET < n.CARDINALITY_LIMIT
    assert {q for q, _ in pairs} == set(QUEUES)
    # a small server still gets the full matrix: a kind enqueued into another queue
    small = seed_pairs(["a", "b"], {"x": "a", "y": "a"})
    assert small == [("a", "x"), ("a", "y"), ("b", "x"), ("b", "y")]


async def test_forty_kinds_in_ten_queues_do_not_overflow(
    store_url: str, client: kiln.Client
) -> None:
    app = many_kinds_app(store_url)
    server = app.server(QUEUES, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False)
    text = generate_latest(registry).decode()
    assert n.OVERFLOW_LABEL not in text
    finished = samples(text, "kiln_jobs_finished_total")
    assert all(s["otel_scope_name"] == "kilnotel" for s in finished)
    by_queue = {q: {s["kiln_job_kind"] for s in finished if s["queue"] == q} for q in QUEUES}
    assert by_queue["q9"] == {"k09", "k19", "k29", "k39"}, by_queue

    running = Running(server)
    await running.started()
    producer = kiln.Client(client._store, app.kinds)
    job_id = await producer.enqueue("k39", {})

    async def done() -> bool:
        return await count(client, "completed", [job_id]) == 1

    await wait_for(done, 20, "the q9 job completed")
    await running.stop()
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert n.OVERFLOW_LABEL not in text
    (completed,) = [s for s in samples(text, "kiln_jobs_finished_total")
                    if s["queue"] == "q9" and s["kiln_job_kind"] == "k39"
                    and s["outcome"] == "completed"]
    assert float(completed["__value__"]) == 1


MONOLITH = {**{f"d{i:03d}": "default" for i in range(350)},
            **{f"m{i:02d}": "mail" for i in range(50)}}


def monolith_app(url: str) -> kiln.App:
    app = kiln.App(url)
    for name, queue in MONOLITH.items():
        async def handler(job: kiln.Job) -> None:
            return None

        app.job(name, queue=queue)(handler)
    return app


def test_seeding_hundreds_of_kinds_stays_within_half_the_limit() -> None:
    pairs = seed_pairs(["default", "mail"], MONOLITH)
    assert len(pairs) * len(n.OUTCOMES) <= n.SEED_BUDGET == n.CARDINALITY_LIMIT // 2
    mail = {k for q, k in pairs if q == "mail"}
    assert mail == {k for k, q in MONOLITH.items() if q == "mail"}  # the small queue whole
    assert len(pairs) == n.SEED_BUDGET // len(n.OUTCOMES)  # the rest goes to default
    # a smaller limit shrinks the seeding with it, fairly
    small = seed_pairs(["default", "mail"], MONOLITH, n.seed_budget(120))
    assert len(small) == 10 and {q for q, _ in small} == {"default", "mail"}


@pytest.mark.parametrize("database_backend", ["postgres"])
async def test_four_hundred_declared_kinds_do_not_overflow(
    store_url: str, client: kiln.Client
) -> None:
    """350 idle kinds on default, 50 busy ones on mail: before the cap the seeding alone
    overflowed, and every mail completion landed in the overflow series."""
    app = monolith_app(store_url)
    server = app.server({"default": 2, "mail": 4}, fast_config())
    provider, registry = kilnotel.prometheus_provider()
    kilnotel.observe(server, provider, traces=False)
    text = generate_latest(registry).decode()
    assert n.OVERFLOW_LABEL not in text
    assert len(samples(text, "kiln_jobs_finished_total")) <= n.SEED_BUDGET

    running = Running(server)
    await running.started()
    producer = kiln.Client(client._store, app.kinds)
    mail = [k for k, q in MONOLITH.items() if q == "mail"]
    ids = [await producer.enqueue(kind, {}) for kind in mail]
    # and two kinds of default that the cap left unseeded: born at their first event
    seeded = {k for _q, k in seed_pairs(["default", "mail"], MONOLITH)}
    late = [k for k, q in MONOLITH.items() if q == "default" and k not in seeded][:2]
    ids += [await producer.enqueue(kind, {}) for kind in late]

    async def done() -> bool:
        return await count(client, "completed", ids) == len(ids)

    await wait_for(done, 30, "the mail jobs completed")
    await running.stop()
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert n.OVERFLOW_LABEL not in text
    completed = {(s["queue"], s["kiln_job_kind"]): float(s["__value__"])
                 for s in samples(text, "kiln_jobs_finished_total")
                 if s["outcome"] == "completed"}
    for kind in mail:
        assert completed[("mail", kind)] == 1, kind
    for kind in late:
        assert completed[("default", kind)] == 1, kind


@pytest.mark.skipif(
    not reader_options(PrometheusMetricReader, 100),
    reason="an OpenTelemetry SDK older than reader cardinality_limits (1.45): no limit to set")
def test_the_cardinality_limit_is_a_setting_and_its_overflow_shows() -> None:
    """A provider made with a limit of 40 series folds the attribute sets past the 40th
    of a counter into the overflow series that KilnMetricsOverflow alerts on."""
    provider, registry = kilnotel.prometheus_provider(cardinality_limit=40)
    meter = provider.get_meter("t")
    counter = meter.create_counter("t.c")
    for i in range(45):
        counter.add(1, {"i": str(i)})
    text = generate_latest(registry).decode()
    provider.shutdown()
    rows = samples(text, "t_c_total")
    assert len(rows) == 41  # 40 of their own and the overflow series
    (overflow,) = [r for r in rows if r.get(n.OVERFLOW_LABEL) == "true"]
    assert float(overflow["__value__"]) == 5
    with pytest.raises(ValueError, match="cardinality_limit"):
        kilnotel.prometheus_provider(cardinality_limit=0)
