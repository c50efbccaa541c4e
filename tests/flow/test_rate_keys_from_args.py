"""Rate limit keys from args or metadata (issue 40 build item 3), for every producer.

``RateLimit(..., key="args.tenant")`` gives each job the rate key
``"<kind's rate key>|<tenant>"``: one bucket per tenant, declared by each enqueue with
the insert. The key comes with the kind's published declaration, so a producer without
the handlers (a bare Client, the CLI, the dashboard) computes the same key as the app
that declares the kind; a job without the value is refused before anything is written.
``kiln enqueue`` takes ``--rate-key``, ``--meta``, ``--unique-by``/``--unique-key``/
``--unique-period``/``--unique-states`` as well.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

import kiln
from kiln import RateLimit
from kiln._model._kinds import Declaration, make_kind
from kiln.stores import Store
from tests.support.cli import enqueue as cli_enqueue
from tests.support.cli import job_json, ok, run_cli

PER_TENANT = RateLimit(rate=2, per=60, key="args.tenant")


async def _noop(job: kiln.Job) -> None:
    return None


def test_the_key_names_the_kind_s_rate_key_and_the_value() -> None:
    assert PER_TENANT.key_of("mail.send", {"tenant": "acme"}, {}) == "mail.send|acme"
    assert PER_TENANT.key_of("mail.send", {"tenant": 42}, {}) == "mail.send|42"
    by_meta = RateLimit(5, key="metadata.org")
    assert by_meta.key_of("smtp", {}, {"org": {"id": 7}}) == 'smtp|{"id":7}'
    long = PER_TENANT.key_of("mail.send", {"tenant": "x" * 500}, {})
    assert long.startswith("mail.send|#") and len(long) < 200
    with pytest.raises(kiln.ValidationError, match="tenant"):
        PER_TENANT.key_of("mail.send", {"other": 1}, {})
    for bad in ("tenant", "args.", "kwargs.x", 3):
        with pytest.raises(kiln.ValidationError, match=r"rate_limit\.key"):
            RateLimit(1, key=bad)  # type: ignore[arg-type]


def test_an_unkeyed_limit_publishes_as_before() -> None:
    kind = make_kind("k", _noop, rate_limit=RateLimit(3, per=2, burst=1))
    assert kind.declaration().options["rate_limit"] == {"rate": 3, "per": 2, "burst": 1}
    keyed = make_kind("k", _noop, rate_limit=PER_TENANT)
    published = keyed.declaration()
    assert published.options["rate_limit"] == {"rate": 2, "per": 60, "burst": 0,
                                               "key": "args.tenant"}
    assert Declaration.of(published).rate_limit == PER_TENANT


async def test_every_producer_keys_the_job_by_tenant(store: Store, store_url: str) -> None:
    app = kiln.App(store_url)
    app.job("mail.send", rate_limit=PER_TENANT)(_noop)
    app.job("mail.bulk", rate_limit=PER_TENANT, rate_key="smtp")(_noop)
    # the app with the handlers
    first = await app.aenqueue("mail.send", {"tenant": "acme"})
    shared = await app.aenqueue("mail.bulk", {"tenant": "acme"})
    given = await app.aenqueue("mail.send", {"tenant": "acme"}, rate_key="vip")
    # a producer without them, once the kind's declaration is published
    await store.kinds_publish("s1", "host", 1, [k.declaration() for k in app.kinds.values()])
    bare = kiln.Client(store)
    second = await bare.enqueue("mail.send", {"tenant": "globex"})
    with pytest.raises(kiln.ValidationError, match="tenant"):
        await bare.enqueue("mail.send", {"to": "x"})
    # the CLI, which holds no handlers either
    third = cli_enqueue(store_url, "mail.send", "--args", '{"tenant": "initech"}')
    keys = {}
    for job_id in (first, shared, given, second, third):
        row = await store.job_get(int(job_id))
        assert row is not None and row.state is kiln.JobState.PENDING
        keys[int(job_id)] = row.rate_key
    assert list(keys.values()) == ["mail.send|acme", "smtp|acme", "vip", "mail.send|globex",
                                   "mail.send|initech"]
    listed = {key: limit for key, limit, _ in await store.rate_limit_list()}
    for key in ("mail.send|acme", "mail.send|globex", "mail.send|initech", "smtp|acme"):
        assert (listed[key].rate, listed[key].per) == (2, 60)  # declared by each enqueue
    await app.aclose()


async def test_enqueue_many_keys_each_job_by_its_args(store: Store, store_url: str) -> None:
    """A batch of a keyed kind: each job its own key (a template built with empty args
    was refused: the bench's 40 tenants could not be enqueued in one batch)."""
    app = kiln.App(store_url)
    app.job("mail.send", rate_limit=PER_TENANT)(_noop)
    ids = await app.aenqueue_many([("mail.send", {"tenant": t}) for t in ("a", "b", "a")])
    keys = [(await store.job_get(int(i))).rate_key for i in ids]  # type: ignore[union-attr]
    assert keys == ["mail.send|a", "mail.send|b", "mail.send|a"]
    with pytest.raises(kiln.ValidationError, match="tenant"):
        await app.aenqueue_many([("mail.send", {"to": "x"})])
    await app.aclose()


def test_kiln_enqueue_takes_rate_key_meta_and_unique(store_url: str) -> None:
    ok(run_cli("migrate", "--database-url", store_url))
    job_id = cli_enqueue(store_url, "report.build", "--args", '{"n": 1, "tenant": "a"}',
                         "--meta", "tenant=42", "--meta", "source=cli", "--meta", 'ok=true',
                         "--rate-key", "reports", "--unique-by", "args.tenant",
                         "--unique-period", "86400", "--unique-states", "completed")
    job: dict[str, Any] = job_json(store_url, job_id)
    assert job["metadata"] == {"tenant": 42, "source": "cli", "ok": True}
    assert job["rate_key"] == "reports"
    again = run_cli("--database-url", store_url, "enqueue", "report.build", "--args",
                    json.dumps({"n": 2, "tenant": "a"}), "--unique-by", "args.tenant",
                    "--unique-period", "86400", "--unique-states", "completed")
    assert again.returncode == 0 and int(again.stdout) == job_id, again
    assert "not inserted" in again.stderr
    bad = run_cli("--database-url", store_url, "enqueue", "x", "--meta", "novalue")
    assert bad.returncode != 0 and "NAME=VALUE" in bad.stderr
    bad = run_cli("--database-url", store_url, "enqueue", "x", "--unique-period", "5")
    assert bad.returncode != 0 and "--unique-by" in bad.stderr
