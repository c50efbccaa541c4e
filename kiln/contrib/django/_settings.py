"""The ``KILN`` setting, and the database URL kiln derives from Django's DATABASES."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlencode

from kiln._errors import ConfigError

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    "APP": None,
    "DASHBOARD_PERMISSION": None,
    "DASHBOARD_READ_ONLY": False,
}
SCHEMES = {
    "django.db.backends.postgresql": "postgresql",
    "django.db.backends.sqlite3": "sqlite",
    "django.db.backends.mysql": "mysql",
}


def kiln_settings() -> dict[str, Any]:
    """``settings.KILN`` over the defaults; an unknown key is an error, not a no-op."""
    from django.conf import settings

    given = getattr(settings, "KILN", {}) or {}
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigError("KILN", unknown[0],
                          f"unknown KILN setting: use {', '.join(sorted(DEFAULTS))}")
    return {**DEFAULTS, **given}


def database_url(alias: str | None = None) -> str:
    """A kiln URL for the Django database ``alias`` (default: ``KILN["DATABASE"]``)."""
    from django.db import connections

    alias = alias or kiln_settings()["DATABASE"]
    if alias not in connections.settings:
        raise ConfigError("KILN.DATABASE", alias, "no such alias in DATABASES")
    return url_of(connections[alias].settings_dict)


def url_of(db: dict[str, Any]) -> str:
    engine = str(db.get("ENGINE", ""))
    scheme = SCHEMES.get(engine)
    if scheme is None:
        raise ConfigError("DATABASES.ENGINE", engine,
                          f"kiln runs on {', '.join(SCHEMES)} only")
    name = str(db.get("NAME") or "")
    if scheme == "sqlite":
        if not name or name == ":memory:" or name.startswith("file:"):
            raise ConfigError("DATABASES.NAME", name, "kiln needs a SQLite file that its "
                              "workers can open too, not an in-memory database")
        return f"sqlite:///{name}"
    auth = quote(str(db.get("USER") or ""), safe="")
    if db.get("PASSWORD"):
        auth += ":" + quote(str(db["PASSWORD"]), safe="")
    host = str(db.get("HOST") or "")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    netloc = f"{auth}@{host}{port}" if auth else f"{host}{port}"
    options = {k: str(v) for k, v in (db.get("OPTIONS") or {}).items()
               if isinstance(v, str | int) and not isinstance(v, bool)}
    query = "?" + urlencode(options) if options and scheme == "postgresql" else ""
    return f"{scheme}://{netloc}/{quote(name)}{query}"
