"""The PostgreSQL store (psycopg 3): LISTEN/NOTIFY, SKIP LOCKED claims, many hosts."""

from kiln.stores.postgres._store import PostgresStore

__all__ = ["PostgresStore"]
