"""The PostgreSQL store's own settings, given as options or as URL parameters.

``pooler``: what stands between kiln and PostgreSQL. None (or ``session``): direct or
session pooling, where a connection is a session (prepared statements, LISTEN).
``transaction``: a transaction-mode pooler (PgBouncer, pgcat, Supavisor, RDS Proxy),
where each transaction may run on another server connection: no server-side
prepared statements, and LISTEN only on ``listen_url`` (a direct or session-mode URL)
or not at all (the server then polls, or hears a Bus).

``schema``: the PostgreSQL schema kiln's tables live in (default: the connection's
search_path, ``public``). Every statement names its tables ``schema.kiln_...``
(``Qualifier``), migrations run with ``SET LOCAL search_path`` in their transaction,
and notifications go on channel ``kiln_<schema>``, so several installations share
one database, through any pooler, without a startup parameter or waking each other.

``notify``: False when a Bus carries the wake-ups (``kiln.App(url, bus=...)``): the
store then sends no NOTIFY at all (every ``pg_notify`` of a statement is rewritten to
a no-op, ``Qualifier``) and opens no LISTEN connection.

The URL form (``postgresql://host/db?pooler=transaction&listen_url=...&schema=...``)
is parsed here and the parameters removed before the URL reaches libpq, which
refuses parameters it does not know. Owns the parsing, the checks and the qualifier.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from kiln._errors import ConfigError
from kiln._model._wakeup import CHANNEL

POOLERS = ("session", "transaction")
_PARAMS = ("pooler", "listen_url", "schema")
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# every table kiln's migrations create (a new one must be added here: the
# schema tests run every conformance plan in a schema of its own)
TABLES = (
    "kiln_audit", "kiln_concurrency_declarations", "kiln_concurrency_keys", "kiln_cron",
    "kiln_installation", "kiln_job_deps", "kiln_jobs", "kiln_kinds", "kiln_leader",
    "kiln_migrations", "kiln_queue_limits", "kiln_queue_pauses", "kiln_rate_limits",
    "kiln_servers", "kiln_timings", "kiln_timings_mark",
)


class Qualifier:
    """Rewrites a statement for one schema: kiln's table names qualified (not index
    or CTE names: only whole words of TABLES), and the notify channel's; without
    ``notify``, each ``pg_notify(channel, payload)`` becomes ``nullif(channel, payload)``,
    which sends nothing and leaves the statement's rows as they were. Statements are
    mostly constants: the rewrites are cached."""

    def __init__(self, schema: str | None, notify: bool = True) -> None:
        self.schema = schema
        self.channel = CHANNEL if schema is None else f"{CHANNEL}_{schema}"
        self._tables = re.compile(r"(?<![\w.])(" + "|".join(TABLES) + r")\b")
        self._notify = f"pg_notify('{CHANNEL}'"
        self._to = f"pg_notify('{self.channel}'" if notify else f"nullif('{self.channel}'"
        self.qualify: Callable[[str], str] = functools.lru_cache(maxsize=2048)(self._rewrite)

    def _rewrite(self, sql: str) -> str:
        if self.schema is not None:
            sql = self._tables.sub(rf"{self.schema}.\1", sql)
        return sql.replace(self._notify, self._to)


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    conninfo: str  # the URL for libpq, without kiln's parameters
    pooler: str | None = None
    listen_url: str | None = None
    schema: str | None = None
    notify: bool = True  # False: a Bus carries the wake-ups; no NOTIFY, no LISTEN

    @property
    def channel(self) -> str:
        return CHANNEL if self.schema is None else f"{CHANNEL}_{self.schema}"

    def qualifier(self) -> Callable[[str], str] | None:
        if self.schema is None and self.notify:
            return None
        return Qualifier(self.schema, self.notify).qualify

    @property
    def transaction_pooled(self) -> bool:
        return self.pooler == "transaction"

    @property
    def prepared(self) -> bool:
        """Whether server-side prepared statements survive between transactions."""
        return not self.transaction_pooled

    @property
    def listen_conninfo(self) -> str | None:
        """The URL the LISTEN connection uses, or None when there is none to use."""
        if not self.notify:
            return None
        if self.listen_url is not None:
            return conninfo(self.listen_url)
        return None if self.transaction_pooled else self.conninfo


def conninfo(url: str) -> str:
    """``url`` without kiln's parameters (for a connection of libpq's own)."""
    return split(url)[0]


def split(url: str) -> tuple[str, dict[str, str]]:
    parts = urlsplit(url)
    if not parts.query:
        return url, {}
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in pairs if k in _PARAMS}
    if not ours:
        return url, {}
    rest = urlencode([(k, v) for k, v in pairs if k not in _PARAMS])
    return urlunsplit(parts._replace(query=rest)), ours


def settings(url: str, *, pooler: str | None = None, listen_url: str | None = None,
             schema: str | None = None, notify: bool = True) -> Settings:
    """The settings of ``url`` and the store options; an option and a URL parameter
    that disagree are refused."""
    base, params = split(url)
    chosen: dict[str, str | None] = {}
    for name, option in (("pooler", pooler), ("listen_url", listen_url), ("schema", schema)):
        param = params.get(name)
        if option is not None and param is not None and option != param:
            raise ConfigError(name, option, f"the URL says {name}={param}")
        chosen[name] = option if option is not None else param
    mode = chosen["pooler"]
    if mode is not None and mode not in POOLERS:
        raise ConfigError("pooler", mode, "use session or transaction (statement mode "
                          "cannot run kiln's multi-statement transactions)")
    listen = chosen["listen_url"]
    if listen is not None and urlsplit(listen).scheme.split("+")[0] not in (
        "postgresql", "postgres"
    ):
        raise ConfigError("listen_url", listen, "a postgresql:// URL (direct or session mode)")
    named = chosen["schema"]
    if named is not None and not _SCHEMA.fullmatch(named):
        raise ConfigError("schema", named, "a lower-case name of letters, digits and _"
                          " (at most 63), not starting with a digit")
    return Settings(conninfo=base, pooler=mode, listen_url=listen, schema=named,
                    notify=notify)
