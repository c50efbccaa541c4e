"""The fast server settings the tests run with, in one place.

``FAST`` keeps the operator's rule dead_after > 3*heartbeat_interval + kill_grace + 5s
(6 > 5.8) while making servers poll, beat, fail over and shut down in well under a
second. ``fast(**overrides)`` is a copy with some settings changed (``None`` drops one,
so the server's default applies); ``fast_config`` builds the ``ServerConfig`` and
``fast_env`` the ``KILN_*`` environment a ``kiln worker`` process reads.
"""

from __future__ import annotations

from typing import Any

import kiln

FAST: dict[str, Any] = {
    "poll_interval": 0.2,
    "heartbeat_interval": 0.2,
    "kill_grace": 0.2,
    "dead_after": 6.0,
    "leader_ttl": 1.0,
    "shutdown_timeout": 1.0,
}


def fast(**overrides: float | None) -> dict[str, Any]:
    """``FAST`` with ``overrides`` applied; an override of ``None`` removes the setting."""
    merged: dict[str, Any] = {**FAST, **overrides}
    return {name: value for name, value in merged.items() if value is not None}


def fast_config(**overrides: float | None) -> kiln.ServerConfig:
    """A ``ServerConfig`` of ``fast(**overrides)``."""
    return kiln.ServerConfig(**fast(**overrides))


def fast_env(**overrides: float | None) -> dict[str, str]:
    """``fast(**overrides)`` as the ``KILN_*`` environment variables of ``kiln worker``."""
    return {f"KILN_{name.upper()}": f"{value:g}" for name, value in fast(**overrides).items()}
