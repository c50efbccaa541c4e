"""The options of a kind and of an enqueue are typed (``Unpack[JobOptions]``,
``Unpack[EnqueueOptions]``): a type checker catches a misspelt or mistyped option,
and at run time an unknown one is refused with an error that names it."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path

import pytest

import kiln
from kiln.stores import store_from_url
from tests.support.typecheck import mypy_user_module


def test_an_unknown_kind_option_is_refused_by_name(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path}/k.db")
    with pytest.raises(kiln.ConfigError, match="max_attempt") as caught:
        app.register("k", lambda job: None, max_attempt=3)  # type: ignore[call-arg]
    assert "max_attempts" in str(caught.value)  # the known options are listed
    assert "k" not in app.kinds


def test_an_unknown_enqueue_option_is_refused_by_name(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path}/k.db")
    app.register("k", lambda job: None)
    app.migrate()
    with pytest.raises(kiln.ValidationError, match="queu"):
        app.enqueue("k", {}, queu="mail")  # type: ignore[call-arg]
    assert asyncio.run(_counts(app)) == []  # nothing was written


async def _counts(app: kiln.App) -> list[kiln.StateCount]:
    try:
        return await app.client().counts()
    finally:
        await app.aclose()


async def test_fan_in_refuses_a_depends_on_of_its_own(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path}/k.db")
    app.register("k", lambda job: None)
    await app.amigrate()
    try:
        with pytest.raises(kiln.ValidationError, match="depends_on"):
            await app.client().enqueue_fan_in([("k", {})], ("k", {}), depends_on=[1])
        assert await app.client().counts() == []
    finally:
        await app.aclose()


@pytest.mark.parametrize(("url", "option"), [
    ("sqlite:///x.db", {"max_conns": 3}),
    ("postgresql://u@127.0.0.1:1/db", {"busy_timeout": 5.0}),
    ("mysql://u@127.0.0.1:1/db", {"min_conns": 2}),
])
def test_a_store_option_of_another_database_is_refused_by_name(
    url: str, option: dict[str, float]
) -> None:
    [name] = option
    with pytest.raises(kiln.ConfigError, match=name):
        store_from_url(url, **option)  # type: ignore[arg-type]


@pytest.mark.timeout(300)
def test_a_type_checker_catches_misspelt_and_mistyped_options(tmp_path: Path) -> None:
    code = textwrap.dedent('''
        import kiln
        app = kiln.App()

        @app.job("ok", queue="mail", max_attempts=3, unique=kiln.Unique())
        def ok(job: kiln.Job) -> None: ...

        app.enqueue("ok", {}, priority=1, delay=2.0, tags=["a"])
        app.enqueue("ok", {}, queu="mail")
        app.enqueue("ok", {}, max_attempts="3")

        @app.job("bad", max_attempt=3)
        def bad(job: kiln.Job) -> None: ...

        kiln.ServerConfig().replace(dead_afte=90)
        kiln.ServerConfig().replace(dead_after="90")
        kiln.filter_of(stat="failed")
        import kiln.web
        kiln.web.serve("sqlite:///x.db", tokn="t")
    ''')
    user, stdout = mypy_user_module(tmp_path, code)
    error = re.compile(re.escape(str(user)) + r":(\d+): error:")
    lines = [line for line in stdout.splitlines() if error.match(line)]
    assert [error.match(line)[1] for line in lines] == [  # type: ignore[index]
        "9", "10", "12", "15", "16", "17", "19"], stdout
    assert '"queu"' in lines[0] and '"max_attempts"' in lines[1] and '"max_attempt"' in lines[2]
    assert '"dead_afte"' in lines[3] and '"dead_after"' in lines[4] and '"stat"' in lines[5]
    assert '"tokn"' in lines[6]


def test_the_typed_keyword_sets_name_exactly_what_they_stand_for() -> None:
    import dataclasses
    import inspect

    from kiln._server._config import ServerConfigChanges
    from kiln.web._app import DashboardOptions, create_app

    fields = {f.name for f in dataclasses.fields(kiln.ServerConfig)}
    assert set(ServerConfigChanges.__annotations__) == fields
    keyword_only = {name for name, p in inspect.signature(create_app).parameters.items()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(DashboardOptions.__annotations__) == keyword_only


def test_an_unknown_filter_key_from_an_untyped_caller_is_refused_by_name() -> None:
    fields: dict[str, object] = {"state": "failed", "stat": "failed"}
    with pytest.raises(kiln.ValidationError, match="stat"):
        kiln.filter_of(**fields)  # type: ignore[arg-type]
