"""assert_enqueued / refute_enqueued: what they match, and the messages they fail with."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from unittest.mock import ANY

import pytest

import kiln
from kiln import testing


@pytest.fixture
def app(tmp_path: Path) -> Iterator[kiln.App]:
    with testing.migrated_url(directory=tmp_path) as url:
        app = kiln.App(url)
        for name, queue in (("email.send", "mail"), ("report.build", "default")):
            app.register(name, lambda job: None, queue=queue)
        yield app
        app.close()


def failure(call: object, *args: object, **kwargs: object) -> str:
    with pytest.raises(AssertionError) as info:
        call(*args, **kwargs)  # type: ignore[operator]
    return str(info.value)


def test_a_missing_job_lists_what_is_enqueued_and_how_it_differs(app: kiln.App) -> None:
    app.enqueue("email.send", {"to": "a@example.com", "opts": {"html": True}})
    app.enqueue("report.build", {"day": 3})
    message = failure(testing.assert_enqueued, app, "email.send",
                      args={"to": "b@example.com", "opts": {"html": False}, "cc": ANY})
    assert message.splitlines() == [
        "expected a job of kind 'email.send' with args containing {'to': 'b@example.com',"
        " 'opts': {'html': False}, 'cc': <ANY>}, found none",
        "jobs enqueued (awaiting, pending, scheduled, available): 2",
        "  #1 'email.send' in 'mail', available, args {'to': 'a@example.com',"
        " 'opts': {'html': True}}",
        "      args['to'] is 'a@example.com', not 'b@example.com'",
        "      args['opts']['html'] is True, not False",
        "      args has no 'cc'",
        "  #2 'report.build' in 'default', available, args {'day': 3}",
    ]


def test_queue_priority_and_metadata_differences_are_named(app: kiln.App) -> None:
    app.enqueue("email.send", {"to": "a"}, priority=2, metadata={"tenant": "t1"})
    message = failure(testing.assert_enqueued, app, "email.send", queue="default", priority=1,
                      metadata={"tenant": "t2"})
    assert message.splitlines()[0] == (
        "expected a job of kind 'email.send' with metadata containing {'tenant': 't2'}"
        " in queue 'default' with priority 1, found none")
    assert message.splitlines()[3:] == [
        "      queue is 'mail', not 'default'",
        "      priority is 2, not 1",
        "      metadata['tenant'] is 't1', not 't2'",
    ]


def test_nothing_enqueued_and_jobs_of_the_kind_in_other_states(app: kiln.App) -> None:
    assert failure(testing.assert_enqueued, app, "email.send") == (
        "expected a job of kind 'email.send', found none\n"
        "no jobs are enqueued (awaiting, pending, scheduled, available)")
    app.enqueue("email.send", {"to": "a"})
    assert testing.drain(app).completed == 1
    assert failure(testing.assert_enqueued, app, "email.send").splitlines() == [
        "expected a job of kind 'email.send', found none",
        "no jobs are enqueued (awaiting, pending, scheduled, available)",
        "jobs of kind 'email.send' in other states: 1",
        "  #1 'email.send' in 'mail', completed, args {'to': 'a'}",
    ]
    [done] = testing.assert_enqueued(app, "email.send", state="completed", count=1)
    assert done.state is kiln.JobState.COMPLETED


def test_a_wrong_count_says_how_many_and_lists_the_matches(app: kiln.App) -> None:
    for n in (1, 2, 3):
        app.enqueue("email.send", {"to": "a", "n": n})
    app.enqueue("email.send", {"to": "b"})
    assert len(testing.assert_enqueued(app, "email.send", args={"to": "a"}, count=3)) == 3
    message = failure(testing.assert_enqueued, app, "email.send", args={"to": "a"}, count=2)
    lines = message.splitlines()
    assert lines[0] == ("expected 2 jobs of kind 'email.send' with args containing"
                        " {'to': 'a'}, found 3")
    assert lines[1] == "matching jobs:"
    assert [line.split()[0] for line in lines[2:5]] == ["#1", "#2", "#3"]
    assert lines[5:] == [
        "other jobs enqueued (awaiting, pending, scheduled, available): 1",
        "  #4 'email.send' in 'mail', available, args {'to': 'b'}",
        "      args['to'] is 'b', not 'a'",
    ]
    assert failure(testing.assert_enqueued, app, "email.send", count=1).startswith(
        "expected 1 job of kind 'email.send', found 4")


def test_refute_lists_what_it_found(app: kiln.App) -> None:
    testing.refute_enqueued(app, "email.send")
    app.enqueue("email.send", {"to": "a"}, delay=60)
    testing.refute_enqueued(app, "email.send", args={"to": "b"})
    testing.refute_enqueued(app, "email.send", state="available")
    assert failure(testing.refute_enqueued, app, "email.send", args={"to": "a"}) == (
        "expected no job of kind 'email.send' with args containing {'to': 'a'}, found 1:\n"
        "  #1 'email.send' in 'mail', scheduled, args {'to': 'a'}")
    assert failure(testing.refute_enqueued, app).startswith("expected no job, found 1:")


def test_args_may_be_a_predicate_or_a_whole_value(app: kiln.App) -> None:
    app.enqueue("report.build", {"rows": 5})
    app.enqueue("email.send", ["not", "a", "dict"])

    def many(args: dict[str, int]) -> bool:
        return args["rows"] > 10

    testing.assert_enqueued(app, "report.build", args=lambda a: a["rows"] == 5)
    testing.assert_enqueued(app, "email.send", args=["not", "a", "dict"])
    lines = failure(testing.assert_enqueued, app, "report.build", args=many).splitlines()
    assert lines[0] == ("expected a job of kind 'report.build' with args matching many,"
                        " found none")
    assert lines[3] == "      args {'rows': 5} do not satisfy many"
    testing.assert_enqueued(app, args=lambda a: a["rows"] == 5, count=1)  # the list: no match
    lines = failure(testing.assert_enqueued, app, args=lambda a: a["rows"] > 5).splitlines()
    assert lines[-1] == "      args ['not', 'a', 'dict'] made <lambda> raise" \
        " TypeError('list indices must be integers or slices, not str')"
    lines = failure(testing.assert_enqueued, app, "email.send", args={"to": "a"}).splitlines()
    assert lines[4] == "      args is ['not', 'a', 'dict'], not a dict"


def test_long_listings_are_cut(app: kiln.App) -> None:
    app.enqueue_many([("report.build", {"n": n, "pad": "x" * 300}) for n in range(25)])
    lines = failure(testing.assert_enqueued, app, "email.send").splitlines()
    assert lines[1] == "jobs enqueued (awaiting, pending, scheduled, available): 25"
    assert lines[-1] == "  ... and 5 more"
    assert len(lines) == 2 + 20 + 1
    assert lines[2].endswith("...") and len(lines[2]) < 300


@pytest.mark.parametrize(("kwargs", "problem"), [
    ({"count": -1}, "count must be a whole number of at least 0, got -1"),
    ({"count": True}, "count must be a whole number"),
    ({"state": "done"}, "unknown state in ['done']"),
    ({"state": []}, "state must name at least one state"),
])
def test_bad_arguments_are_refused_by_name(
    app: kiln.App, kwargs: dict[str, object], problem: str
) -> None:
    with pytest.raises(kiln.ValidationError, match=problem.replace("[", r"\[")):
        testing.assert_enqueued(app, "email.send", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(kiln.ValidationError, match="kind must be a job kind's name"):
        testing.enqueued_jobs(app, 3)  # type: ignore[arg-type]


def test_an_unmigrated_database_says_so(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path / 'none.db'}")
    with pytest.raises(kiln.NotMigratedError, match="kiln migrate"):
        testing.enqueued_jobs(app)
    app.close()


def test_tags_and_dependencies_are_matched_and_named(app: kiln.App) -> None:
    first = int(app.enqueue("report.build", {"day": 1}))
    second = int(app.enqueue("report.build", {"day": 2}))
    fan_in = int(app.enqueue("email.send", {"to": "a"}, tags=["billing", "urgent"],
                             depends_on=[second, first]))
    [row] = testing.assert_enqueued(app, "email.send", tags=["urgent"],
                                    depends_on=[first, second])
    assert row.id == fan_in
    testing.refute_enqueued(app, "email.send", tags=["urgent", "eu"])
    testing.refute_enqueued(app, "email.send", depends_on=[first])  # exactly these jobs
    assert testing.enqueued_jobs(app, depends_on=[]) == testing.enqueued_jobs(
        app, "report.build")
    message = failure(testing.assert_enqueued, app, "email.send", tags=["eu"],
                      depends_on=[first])
    assert message.splitlines()[0] == (
        f"expected a job of kind 'email.send' tagged 'eu' depending on [{first}], found none")
    assert "      tags are ['billing', 'urgent'], without ['eu']" in message.splitlines()
    assert (f"      depends on [{first}, {second}], not [{first}]"
            in message.splitlines())
    with pytest.raises(kiln.ValidationError, match="tags must be a list"):
        testing.assert_enqueued(app, tags="urgent")  # a str is a Sequence[str] to mypy
