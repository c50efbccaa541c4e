"""ServerContext: what a server shares with its background services."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kiln._events import EventHub
from kiln._model._kinds import Kind
from kiln._server._config import ServerConfig
from kiln._server._identity import Identity
from kiln.stores import Store

if TYPE_CHECKING:
    from kiln._model._recurring import Recurring


@dataclasses.dataclass
class ServerContext:
    store: Store
    config: ServerConfig
    events: EventHub
    kinds: Mapping[str, Kind]
    identity: Identity
    leader_since: Callable[[], float | None]  # monotonic time the lease was gained
    # queue -> jobs that became available, and why (JobsReleased.reason)
    wake: Callable[[dict[str, int], str], None]
    recurring: list[Recurring] = dataclasses.field(default_factory=list)
    # kinds whose concurrency limit changed when this server published them: the
    # adopter gives their waiting jobs the keys the new limit gives (shared, so a
    # publish after a rejoin adds to it)
    rekey: set[str] = dataclasses.field(default_factory=set)
    # kinds whose declaration in use is this server's, as of the adopter's last pass: a
    # pool rekeys a job of those claimed under another key (kiln._server._misfiled)
    in_use: set[str] = dataclasses.field(default_factory=set)
