"""The series budget: a server with many kinds and queues stays under the SDK's limit.

40 kinds over 10 queues (4 declared on each), one server serving all of them: seeding
every queue x kind x outcome would be 2,400 series of kiln_jobs_finished_total, past the
SDK's 2,000, so the last queue's completions would fold into otel_metric_overflow.
"""

from __future__ import annotations

import re

from prometheus_client import generate_latest

import kiln
import kilnotel
from kilnotel import names as n
from kilnotel._metrics import seed_pairs
from tests.otel.conftest import Running, count, fast_config, wait_until

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

    await wait_until(done, 20, "the q9 job completed")
    await running.stop()
    text = generate_latest(registry).decode()
    provider.shutdown()
    assert n.OVERFLOW_LABEL not in text
    (completed,) = [s for s in samples(text, "kiln_jobs_finished_total")
                    if s["queue"] == "q9" and s["kiln_job_kind"] == "k39"
                    and s["outcome"] == "completed"]
    assert float(completed["__value__"]) == 1
