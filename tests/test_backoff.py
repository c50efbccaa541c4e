"""Backoff policies take seconds or timedeltas, and name the parameter they refuse."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

import kiln
from kiln._model._retry import backoff_from_json, backoff_to_json, retry_window


def test_exponential_takes_timedeltas_as_the_operators_guide_writes_it() -> None:
    policy = kiln.Exponential(timedelta(seconds=2), timedelta(minutes=2))
    assert policy == kiln.Exponential(2, 120)
    assert isinstance(policy.base, float) and isinstance(policy.max, float)
    low, high = retry_window(policy, 12)
    assert (low, high) == (363.0, 726.0)  # six to twelve minutes in all
    assert backoff_from_json(backoff_to_json(policy)) == policy  # stored with a job as JSON


def test_constant_takes_a_timedelta() -> None:
    assert kiln.Constant(timedelta(milliseconds=500)) == kiln.Constant(0.5)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("2", 120), "base"),
        ((None, 120), "base"),
        ((True, 120), "base"),
        ((math.nan, 120), "base"),
        ((0, 120), "base"),
        ((timedelta(seconds=-1), 120), "base"),
        ((2, math.inf), "max"),
        ((2, "2m"), "max"),
        ((2, timedelta(seconds=1)), "max"),
    ],
)
def test_exponential_names_the_bad_parameter(args: tuple[Any, Any], field: str) -> None:
    with pytest.raises(kiln.ConfigError) as err:
        kiln.Exponential(*args)
    assert err.value.field == field
    assert f"invalid {field}=" in str(err.value)


@pytest.mark.parametrize("value", ["1", None, math.inf, -1, timedelta(seconds=-1)])
def test_constant_names_the_bad_parameter(value: Any) -> None:
    with pytest.raises(kiln.ConfigError) as err:
        kiln.Constant(value)
    assert err.value.field == "seconds"


def test_a_kind_registered_with_timedeltas_runs_its_retry_window() -> None:
    app = kiln.App("sqlite:///:memory:")

    @app.job("pay", max_attempts=12,
             backoff=kiln.Exponential(timedelta(seconds=2), timedelta(minutes=2)))
    def pay(job: kiln.Job) -> None: ...

    kind = app.kinds["pay"]
    assert kind.backoff == kiln.Exponential(2, 120)
