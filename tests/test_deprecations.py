"""The names issue 43 replaced keep working for one release: each use warns with a
DeprecationWarning that names the new one, pointing at the caller's line."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

import kiln
import kiln.events


@pytest.fixture
def app(tmp_path: Path) -> Iterator[kiln.App]:
    with kiln.App(f"sqlite:///{tmp_path / 'k.db'}") as app:
        app.register("k", lambda job: None)
        app.migrate()
        yield app


@pytest.mark.parametrize("name", kiln.events.__all__)
def test_an_event_under_its_old_name_warns_and_is_the_same_class(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"kiln\.{name} is deprecated.*"
                                               rf"use kiln\.events\.{name}$") as caught:
        old = getattr(kiln, name)
    assert old is getattr(kiln.events, name)
    assert caught[0].filename == __file__


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'Nope'"):
        kiln.Nope  # type: ignore[attr-defined]  # noqa: B018


def test_from_kiln_import_an_event_warns() -> None:
    with pytest.warns(DeprecationWarning, match=r"use kiln\.events\.JobFinished"):
        from kiln import JobFinished  # type: ignore[attr-defined]  # noqa: F401


def test_client_insert_many_warns_and_still_inserts(app: kiln.App) -> None:
    client = app.sync_client()
    with pytest.warns(DeprecationWarning, match=r"Client\.insert_many_sync is deprecated.*"
                                                r"use Client\.enqueue_many_sync$"):
        [one] = client.insert_many_sync([client.build("k", {})])

    async def insert() -> list[kiln.EnqueueResult]:
        try:
            aclient = app.client()
            return await aclient.insert_many([aclient.build("k", {"n": 2})])
        finally:
            await app.aclose()

    with pytest.warns(DeprecationWarning, match=r"Client\.insert_many is deprecated.*"
                                                r"use Client\.enqueue_many$"):
        [two] = asyncio.run(insert())
    assert (one, two) == (1, 2)


def test_job_filter_error_contains_warns_and_is_error() -> None:
    with pytest.warns(DeprecationWarning, match=r"JobFilter\(error_contains=\.\.\.\) is "
                                                r"deprecated.*use JobFilter\(error=\.\.\.\)$"):
        old = kiln.JobFilter(error_contains="smtp")  # type: ignore[call-arg]
    assert old == kiln.JobFilter(error="smtp") == kiln.filter_of(error="smtp")
    with pytest.warns(DeprecationWarning, match=r"JobFilter\.error_contains is deprecated.*"
                                                r"use JobFilter\.error$"):
        assert old.error_contains == "smtp"  # type: ignore[attr-defined]
    assert dataclasses.replace(old, queue="q").error == "smtp"  # replace: no warning


def test_the_new_names_do_not_warn(app: kiln.App) -> None:
    """pyproject turns warnings into errors: any warning here fails the test."""
    assert kiln.events.JobFinished.__name__ == "JobFinished"
    client = app.sync_client()
    assert client.enqueue_many_sync([client.build("k", {}), ("k", {"n": 1})]) == [1, 2]
    assert kiln.JobFilter(error="x").error == "x"
