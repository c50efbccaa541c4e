"""docs/observability.md lists every metric and span of the names module, correctly."""

from __future__ import annotations

import re
from pathlib import Path

from kilnotel import names as n

DOC = Path(__file__).resolve().parents[2] / "docs" / "observability.md"
ROW = re.compile(
    r"^\| `(kiln\.[a-z_.]+)` \| `([a-z_:]+)` \| (\w+) \| `([^`]+)` \| ([^|]+) \|", re.M
)


def _doc() -> str:
    return DOC.read_text()


def test_every_metric_is_documented_with_its_names_type_unit_and_attributes() -> None:
    rows = {m.group(1): m for m in ROW.finditer(_doc())}
    missing, unknown = set(n.BY_NAME) - set(rows), set(rows) - set(n.BY_NAME)
    assert not missing and not unknown, f"missing: {sorted(missing)}, unknown: {sorted(unknown)}"
    for name, row in rows.items():
        metric = n.BY_NAME[name]
        assert row.group(2) == metric.prometheus_name, name
        assert row.group(3) == metric.type, name
        assert row.group(4) == metric.unit, name
        attrs = tuple(re.findall(r"`([^`]+)`", row.group(5)))
        assert attrs == metric.attributes, name
    assert len(ROW.findall(_doc())) == len(n.METRICS), "a metric is listed twice"


def test_every_span_event_and_span_attribute_is_documented() -> None:
    doc = _doc()
    for name, kind, _when in n.SPANS:
        assert f"| `{name}` | {kind} |" in doc, name
    for event in n.SPAN_EVENTS:
        assert f"| `{event}` |" in doc, event
    for attribute in (n.MESSAGING_SYSTEM, n.MESSAGING_DESTINATION, n.MESSAGING_OPERATION_TYPE,
                      n.MESSAGING_OPERATION_NAME, n.MESSAGING_MESSAGE_ID, n.KIND,
                      n.SPAN_ATTEMPT, n.SPAN_OUTCOME, n.SPAN_RETRY_IN, n.SPAN_RESCUES):
        assert f"`{attribute}`" in doc, attribute


def test_documented_buckets_are_the_real_ones() -> None:
    doc = _doc()
    for buckets in (n.WAIT_BUCKETS, n.DURATION_BUCKETS, n.QUERY_BUCKETS):
        listed = ", ".join(f"{b:g}" for b in buckets)
        assert re.sub(r"\s+", " ", listed) in re.sub(r"\s+", " ", doc), listed
