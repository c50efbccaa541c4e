"""The MySQL and MariaDB store (MariaDB 10.6+, MySQL 8)."""

from kiln.stores.mysql._store import MySQLStore

__all__ = ["MySQLStore"]
