"""Point an existing App at a test database for a while, and give it back its own.

The App object that the user's code imports is the one that must enqueue into the test
database, so the plugin rebinds it in place rather than making another. Everything in
App that depends on its URL is listed here (tests/testing/test_binding.py fails when
App grows an attribute this module does not know).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Iterator

from kiln._app import App
from kiln._client._catalog import KindCatalog
from kiln.stores import StoreOptions, store_from_url
from kiln.stores._scratch import scheme_of

# App's attributes that follow its URL; the others (kinds, middleware, ...) stay
URL_BOUND = ("url", "_store_options", "_sync_store", "_sync_catalog", "_clients")


@contextlib.contextmanager
def bound(app: App, url: str) -> Iterator[App]:
    """``app`` enqueues into (and drains from) ``url`` inside the block."""
    saved = {name: getattr(app, name) for name in URL_BOUND}
    options: StoreOptions = app._store_options if scheme_of(app.url) == scheme_of(url) else {}
    app.url = url
    app._store_options = options
    app._sync_store = store_from_url(url, **options)
    app._sync_catalog = KindCatalog(app._sync_store, app.kinds)
    app._clients = weakref.WeakKeyDictionary()
    try:
        yield app
    finally:
        try:
            close_stores(app)
        finally:
            for name, value in saved.items():
                setattr(app, name, value)


def close_stores(app: App) -> None:
    """Close the stores ``app`` opened: its sync store and each event loop's client."""
    app._portal.run(app._sync_store.close())
    close_clients(app)


def close_clients(app: App) -> None:
    """Close each event loop's client store on its loop, while that loop is open; the
    plugin calls this right after an async test, before its loop is closed."""
    for loop, client in list(app._clients.items()):
        if loop.is_closed():
            continue
        if loop.is_running():  # another thread's (kiln.testing's own loop, say)
            asyncio.run_coroutine_threadsafe(client.close(), loop).result(10)
        else:
            loop.run_until_complete(client.close())
        app._clients.pop(loop, None)
