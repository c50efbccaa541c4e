"""Helpers of the PostgreSQL plan checks (tests/stores/test_postgres_*_plans.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


def postgres_only(why: str) -> Callable[..., Iterator[str]]:
    """A ``pg_url`` fixture: the store's URL on PostgreSQL; elsewhere the test is
    skipped, saying ``why``."""

    @pytest.fixture
    def pg_url(backend: str, store_url: str) -> Iterator[str]:
        if backend != "postgresql":
            pytest.skip(f"postgres only: {why}")
        yield store_url

    return pg_url


def plan_nodes(node: dict[str, Any], kind: str | None = None) -> Iterator[dict[str, Any]]:
    """Every node of an EXPLAIN (FORMAT JSON) plan, or those of Node Type ``kind``."""
    if kind is None or node.get("Node Type") == kind:
        yield node
    for child in node.get("Plans", []) or []:
        yield from plan_nodes(child, kind)
