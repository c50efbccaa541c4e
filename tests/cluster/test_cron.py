"""Recurring schedules: declaration errors and slot arithmetic (no database)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import kiln
from kiln._model._recurring import Recurring


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    ("cron", "reason"),
    [
        ("* * * *", "five fields"),  # too few
        ("* * * * * *", "five fields"),  # six: no seconds field
        ("", "five fields"),
        ("@every_minute", "five fields"),  # not a shortcut
        ("60 * * * *", "out of range"),
        ("* 24 * * *", "out of range"),
        ("* * 32 * *", "out of range"),
        ("* * * 13 *", "out of range"),
        ("* * * * 8", "out of range"),
        ("*/0 * * * *", "out of range"),
        ("x * * * *", "not cron syntax"),
        ("0 0 31 2 *", "no date ever matches"),
    ],
)
def test_malformed_cron_is_an_error_at_declaration(cron: str, reason: str) -> None:
    app = kiln.App("sqlite:///unused.db")
    with pytest.raises(kiln.CronError, match=reason) as info:
        app.schedule("bad", "k", cron=cron)
    assert info.value.expression == cron
    assert app.recurring == []


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "UTC+99"])
def test_unknown_time_zone_is_an_error(zone: str) -> None:
    with pytest.raises(kiln.CronError, match="time zone"):
        kiln.App("sqlite:///unused.db").schedule("bad", "k", cron="0 * * * *", timezone=zone)


@pytest.mark.parametrize("every", [0, -1, float("inf"), float("nan"), True, "5"])
def test_bad_interval_is_an_error(every: object) -> None:
    with pytest.raises(kiln.CronError, match="interval"):
        Recurring(name="bad", kind="k", args={}, every=every)  # type: ignore[arg-type]


def test_exactly_one_of_cron_and_every() -> None:
    with pytest.raises(kiln.CronError, match="exactly one"):
        Recurring(name="bad", kind="k", args={})
    with pytest.raises(kiln.CronError, match="exactly one"):
        Recurring(name="bad", kind="k", args={}, cron="* * * * *", every=5)


def test_bad_job_options_fail_at_declaration() -> None:
    app = kiln.App("sqlite:///unused.db")
    with pytest.raises(kiln.ValidationError, match="unknown enqueue option"):
        app.schedule("bad", "k", every=60, colour="blue")  # type: ignore[call-arg]
    app.schedule("ok", "k", every=60)
    with pytest.raises(kiln.ConfigError, match="exists"):
        app.schedule("ok", "k", every=30)


def test_shortcuts_expand() -> None:
    hourly = Recurring(name="h", kind="k", args={}, cron="@hourly")
    assert hourly.slot_at_or_before(at("2024-05-01T10:59:59")) == at("2024-05-01T10:00:00")
    daily = Recurring(name="d", kind="k", args={}, cron="@daily")
    assert daily.next_slot_after(at("2024-05-01T10:00:00")) == at("2024-05-02T00:00:00")


def test_cron_slots() -> None:
    r = Recurring(name="five", kind="k", args={}, cron="*/5 * * * *")
    assert r.slot_at_or_before(at("2024-01-01T10:07:03")) == at("2024-01-01T10:05:00")
    assert r.slot_at_or_before(at("2024-01-01T10:05:00")) == at("2024-01-01T10:05:00")
    assert r.next_slot_after(at("2024-01-01T10:05:00")) == at("2024-01-01T10:10:00")


def test_time_zone_and_daylight_saving() -> None:
    r = Recurring(name="tz", kind="k", args={}, cron="0 9 * * *", timezone="Europe/Berlin")
    assert r.slot_at_or_before(at("2024-01-15T12:00:00")) == at("2024-01-15T08:00:00")  # CET
    assert r.slot_at_or_before(at("2024-07-15T12:00:00")) == at("2024-07-15T07:00:00")  # CEST


def test_interval_slots_sit_on_multiples_of_the_interval() -> None:
    r = Recurring(name="i", kind="k", args={}, every=900)
    # a timedelta is accepted, as ServerConfig's durations are
    assert Recurring(name="t", kind="k", args={}, every=timedelta(minutes=15)).every == 900.0
    assert r.slot_at_or_before(at("2024-01-01T10:29:59")) == at("2024-01-01T10:15:00")
    assert r.next_slot_after(at("2024-01-01T10:15:00")) == at("2024-01-01T10:30:00")
