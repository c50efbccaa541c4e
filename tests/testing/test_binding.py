"""kiln.testing.bound: the user's App, pointed at a test database and given back."""

from __future__ import annotations

from pathlib import Path

import kiln
from kiln import testing
from kiln.testing._binding import URL_BOUND

# every attribute App.__init__ sets, and whether it follows the URL: a new one fails
# here until _binding knows whether to rebind it
KNOWN = {
    "url": True, "_store_options": True, "_sync_store": True, "_sync_catalog": True,
    "_clients": True, "kinds": False, "bus": False, "known_kinds_only": False,
    "recurring": False, "queue_limits": False, "middleware": False, "events": False,
    "enqueue_hooks": False,
    "_portal": False, "_lock": False,
}


def test_binding_knows_every_attribute_of_app(tmp_path: Path) -> None:
    app = kiln.App(f"sqlite:///{tmp_path / 'a.db'}")
    assert set(vars(app)) == set(KNOWN)
    assert set(URL_BOUND) == {name for name, follows in KNOWN.items() if follows}
    app.close()


def test_bound_points_the_app_at_the_test_database_and_gives_it_back(tmp_path: Path) -> None:
    own = tmp_path / "own.db"
    app = kiln.App(f"sqlite:///{own}", busy_timeout=5.0)
    app.register("k", lambda job: None)
    before = {name: getattr(app, name) for name in URL_BOUND}
    with testing.migrated_url(directory=tmp_path) as url, testing.bound(app, url):
        assert app.url == url and app._store_options == {"busy_timeout": 5.0}
        app.enqueue("k", {"n": 1})
        testing.assert_enqueued(app, "k", args={"n": 1})
        assert testing.drain(app).completed == 1
    assert {name: getattr(app, name) for name in URL_BOUND} == before
    assert not own.exists()  # the app's own database was never touched
    app.close()


def test_store_options_of_another_dialect_are_left_out(tmp_path: Path) -> None:
    app = kiln.App("postgresql://nobody@127.0.0.1:1/none", max_conns=3)
    app.register("k", lambda job: None)
    with testing.migrated_url(directory=tmp_path) as url, testing.bound(app, url):
        assert app._store_options == {}
        app.enqueue("k")
        testing.assert_enqueued(app, "k", count=1)
    assert app._store_options == {"max_conns": 3}
