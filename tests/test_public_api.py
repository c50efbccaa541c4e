"""kiln's public surface is deliberate: ``__all__`` is sorted, complete and exact.

A name defined in ``kiln/__init__.py`` that is not in ``__all__`` is an accidental
export; a name in ``__all__`` that does not exist breaks ``from kiln import *``.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
import typing

import pytest

import kiln
import kiln.events


def public_names(module: types.ModuleType) -> set[str]:
    """Names a user sees on the module, minus submodules (imported packages show up there)."""
    return {
        name for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


def test_all_is_sorted_without_duplicates() -> None:
    assert kiln.__all__ == sorted(kiln.__all__)
    assert len(set(kiln.__all__)) == len(kiln.__all__)


def test_all_equals_the_public_names_defined() -> None:
    defined = public_names(kiln)
    assert sorted(defined - set(kiln.__all__)) == [], "defined but not exported"
    assert sorted(set(kiln.__all__) - defined) == [], "exported but not defined"


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from kiln import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == kiln.__all__


def test_every_export_is_kilns_own() -> None:
    """No foreign object (a typing helper, a stdlib class) leaks out under kiln's name."""
    for name in kiln.__all__:
        module = getattr(getattr(kiln, name), "__module__", None)
        assert module is None or module.split(".")[0] == "kiln", (name, module)


def test_the_user_view_of_design_md_is_there() -> None:
    for name in ("App", "Job", "JobHandle", "Exponential", "ServerConfig", "Server", "Shutdown",
                 "retry_window", "KilnError"):
        assert name in kiln.__all__
    assert isinstance(kiln.__version__, str) and kiln.__version__


def test_kiln_testing_exports_exactly_its_all() -> None:
    from kiln import testing

    assert testing.__all__ == sorted(testing.__all__)
    assert sorted(public_names(testing)) == testing.__all__
    for name in testing.__all__:
        assert getattr(testing, name).__module__.startswith("kiln.testing."), name


def test_kiln_logging_exports_exactly_its_all() -> None:
    """kiln.logging (issue 42): the filters and formatters the docs tell users to install,
    public instead of imported from private modules."""
    import kiln.logging

    assert kiln.logging.__all__ == sorted(kiln.logging.__all__) == [
        "JobContextFilter", "JsonFormatter", "TextFormatter", "TraceContextFilter",
        "use_trace_source"]
    assert sorted(public_names(kiln.logging)) == kiln.logging.__all__
    for name in kiln.logging.__all__:
        assert getattr(kiln.logging, name).__module__.startswith("kiln."), name


# the surface, pinned (issue 43): the events live in kiln.events; a change here is a
# change of the public API, and belongs in the "Upgrading" notes of docs/guide.md
SURFACE = [
    "App", "AttemptError", "AuditEntry", "Bus", "Cancel", "CancelResult", "Client",
    "Concurrency", "ConfigError", "Constant", "CronError", "Custom", "EnqueueOptions",
    "EnqueueResult", "Exponential", "Fail", "FencedError", "Health", "InProcessBus", "Job",
    "JobFilter", "JobFinishedError", "JobHandle", "JobKind", "JobNotFoundError", "JobOptions",
    "JobRow", "JobState", "KilnError", "NewJob", "NotMigratedError", "Outcome", "PublishedKind",
    "QueueState", "QueueStats", "RateLimit", "Recurring", "RedisBus", "ResultError", "Server",
    "ServerConfig", "ServerInfo", "ServerStats", "Shutdown", "Snooze", "StateCount",
    "StoreError", "StoreOptions", "TableSize", "Unique", "UnknownKindError",
    "UnknownQueueError", "UnreachableError", "VERSION", "ValidationError", "filter_of", "kind",
    "retry_window",
]
EVENTS = [
    "ClaimQueried", "CompleterCrashed", "Event", "EventHub", "Fenced", "HandlerStuck",
    "Heartbeat", "JobCancelled", "JobClaimed", "JobFinished", "JobReconciled", "JobRescued",
    "JobStarted", "JobsAdmitted", "JobsEnqueued", "JobsReleased", "LeaderChanged",
    "MaintenanceRan", "NotifierChanged", "ResultDropped", "ResultPoisoned", "ResultsUnapplied",
    "ServerStopping", "StoreFailed",
]


def test_the_surface_is_pinned() -> None:
    assert kiln.__all__ == SURFACE
    assert kiln.events.__all__ == EVENTS
    assert sorted(public_names(kiln.events)) == EVENTS
    assert not set(SURFACE) & set(EVENTS)
    for name in EVENTS:
        obj = getattr(kiln.events, name)
        assert obj.__module__ in ("kiln._events", "kiln.events"), name
        assert name == "Event" or issubclass(obj, kiln.events.Event) or name == "EventHub"


# the naming rule (docs/guide.md, "One naming rule") ---------------------------------------
# App and the kind refs are used from sync code and from any event loop: sync ``x``,
# async ``ax``. Client, Job and Server are bound to one event loop: async ``x``, sync
# ``x_sync``. The enqueue verbs are the same on App and Client, in both colours.
ANY_THREAD = (kiln.App, kiln.JobHandle, kiln.JobKind)
ONE_LOOP = (kiln.Client, kiln.Job, kiln.Server)
VERBS = ("enqueue", "enqueue_many", "enqueue_chain", "enqueue_fan_in")


def _methods(cls: type) -> dict[str, object]:
    return {name: fn for name, fn in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")}


@pytest.mark.parametrize("cls", ANY_THREAD, ids=lambda c: c.__name__)
def test_where_sync_is_at_home_async_is_a_prefixed(cls: type) -> None:
    methods = _methods(cls)
    for name, fn in methods.items():
        if inspect.iscoroutinefunction(fn):
            assert name.startswith("a") and name[1:] in methods, name  # its sync twin
            assert not inspect.iscoroutinefunction(methods[name[1:]]), name
        assert not name.endswith("_sync"), name


@pytest.mark.parametrize("cls", ONE_LOOP, ids=lambda c: c.__name__)
def test_where_async_is_at_home_sync_is_sync_suffixed(cls: type) -> None:
    methods = _methods(cls)
    for name, fn in methods.items():
        if name.endswith("_sync"):
            twin = name.removesuffix("_sync")
            assert not inspect.iscoroutinefunction(fn), name
            assert inspect.iscoroutinefunction(methods.get(twin)), name  # its async twin
        if name.startswith("a") and name[1:] in methods:
            raise AssertionError(f"{cls.__name__}.{name}: an a-prefixed twin on a loop's object")


@pytest.mark.parametrize("verb", VERBS)
def test_app_and_client_have_the_same_enqueue_verbs_with_the_same_results(verb: str) -> None:
    app_sync, app_async = getattr(kiln.App, verb), getattr(kiln.App, "a" + verb)
    client_async, client_sync = getattr(kiln.Client, verb), getattr(kiln.Client, verb + "_sync")
    assert inspect.iscoroutinefunction(app_async) and inspect.iscoroutinefunction(client_async)
    assert not inspect.iscoroutinefunction(app_sync)
    assert not inspect.iscoroutinefunction(client_sync)
    results = {str(typing.get_type_hints(fn)["return"])
               for fn in (app_sync, app_async, client_async, client_sync)}
    assert len(results) == 1, results
    params = {tuple(inspect.signature(fn).parameters)
              for fn in (app_sync, app_async, client_async, client_sync)}
    assert len(params) == 1, params


def test_chains_and_fan_ins_give_enqueue_results() -> None:
    chain = typing.get_type_hints(kiln.Client.enqueue_chain)["return"]
    fan_in = typing.get_type_hints(kiln.Client.enqueue_fan_in)["return"]
    assert chain == list[kiln.EnqueueResult]
    assert fan_in == tuple[list[kiln.EnqueueResult], kiln.EnqueueResult]


def test_a_filter_field_has_one_name() -> None:
    """``filter_of``'s keywords are ``JobFilter``'s fields; ``state`` (one or several)
    builds ``states``, the one pair named apart."""
    keywords = set(inspect.signature(kiln.filter_of).parameters) - {"unknown"}
    fields = {f.name for f in dataclasses.fields(kiln.JobFilter)}
    assert keywords - {"state"} == fields - {"states"}
