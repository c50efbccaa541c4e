"""The embedded SQLite store."""

from kiln.stores.sqlite._store import SQLiteStore, connect

__all__ = ["SQLiteStore", "connect"]
