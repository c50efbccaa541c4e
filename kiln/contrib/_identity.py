"""Handing a host application's signed-in user to the dashboard.

The host application has authenticated the request itself; the dashboard then takes
the user it names as the one who acts (audit log, CSRF binding) and leaves the Host
check to the host application (kiln.web._guard.HOST_IDENTITY).
"""

from __future__ import annotations

from typing import Any

from kiln.web._auth import Identity
from kiln.web._guard import HOST_IDENTITY


def user_name(user: Any) -> str:
    """A readable name for what a host's auth returned: a str, or a user object."""
    if isinstance(user, str):
        return user
    for attribute in ("username", "name", "email", "id"):
        value = getattr(user, attribute, None)
        if value:
            return str(value)
    return str(user)


def with_identity(scope: dict[str, Any], user: Any, root_path: str | None = None) -> dict[str, Any]:
    """The scope to hand the dashboard: ``user`` acts, optionally below ``root_path``."""
    child = {k: v for k, v in scope.items() if k not in ("router", "endpoint", "route")}
    child[HOST_IDENTITY] = Identity(user_name(user)[:200], "host")
    if root_path is not None:
        child["root_path"] = root_path
    return child
