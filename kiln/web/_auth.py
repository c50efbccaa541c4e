"""Who may use the dashboard: a bearer token (header or login cookie) or HTTP basic auth.

Owns checking credentials, the signed session cookie that a token login sets, and
reading credentials from the environment. Comparisons are constant-time. Knows
nothing about pages or the store.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
import time
from collections.abc import Mapping

from kiln._errors import ConfigError

SESSION_COOKIE = "kiln_session"
SESSION_MAX_AGE = 12 * 3600
ENV_TOKEN = "KILN_DASHBOARD_TOKEN"
ENV_USER = "KILN_DASHBOARD_USER"
ENV_PASSWORD = "KILN_DASHBOARD_PASSWORD"


@dataclasses.dataclass(frozen=True)
class Auth:
    """The configured credentials; with neither, everyone is let in (loopback only)."""

    token: str | None = None
    basic: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("token", "***", "a dashboard token needs at least 16 characters")
        if self.basic is not None:
            user, password = self.basic
            if not user or ":" in user or not password:
                raise ConfigError(
                    "basic_auth", (user, "***"),
                    "give (user, password): a user without ':' and a non-empty password",
                )

    def __repr__(self) -> str:  # never print secrets
        return f"Auth(token={'set' if self.token else None}, basic={'set' if self.basic else None})"

    @property
    def enabled(self) -> bool:
        return self.token is not None or self.basic is not None

    def identify(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> str | None:
        """The user name of an authenticated request, or None."""
        if not self.enabled:
            return "anonymous"
        scheme, _, value = headers.get("authorization", "").partition(" ")
        scheme = scheme.lower()
        if self.token is not None and scheme == "bearer" and _same(value.strip(), self.token):
            return "token"
        if self.basic is not None and scheme == "basic":
            user = self._basic_user(value.strip())
            if user is not None:
                return user
        if self.token is not None and self.session_valid(cookies.get(SESSION_COOKIE, "")):
            return "token"
        return None

    def _basic_user(self, value: str) -> str | None:
        assert self.basic is not None
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        ok_user = _same(user, self.basic[0])
        ok_password = _same(password, self.basic[1])
        return user if sep and ok_user and ok_password else None

    def check_token(self, candidate: str) -> bool:
        return self.token is not None and _same(candidate, self.token)

    # the login cookie: "<issued>.<hmac>", keyed by the token so every replica agrees
    def _session_key(self) -> bytes:
        assert self.token is not None
        return hashlib.sha256(b"kiln-dashboard-session\x00" + self.token.encode()).digest()

    def session_issue(self, now: float | None = None) -> str:
        issued = str(int(time.time() if now is None else now))
        sig = hmac.new(self._session_key(), issued.encode(), hashlib.sha256).hexdigest()
        return f"{issued}.{sig}"

    def session_valid(self, value: str, now: float | None = None) -> bool:
        issued, _, sig = value.partition(".")
        if self.token is None or not issued.isdigit() or not sig:
            return False
        want = hmac.new(self._session_key(), issued.encode(), hashlib.sha256).hexdigest()
        age = (time.time() if now is None else now) - int(issued)
        return _same(sig, want) and -60 <= age <= SESSION_MAX_AGE


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogatepass"), b.encode("utf-8"))


def auth_from_env(environ: Mapping[str, str] | None = None) -> Auth:
    """KILN_DASHBOARD_TOKEN, or KILN_DASHBOARD_USER with KILN_DASHBOARD_PASSWORD."""
    env = os.environ if environ is None else environ
    token = env.get(ENV_TOKEN) or None
    user, password = env.get(ENV_USER) or None, env.get(ENV_PASSWORD) or None
    if (user is None) != (password is None):
        raise ConfigError(
            ENV_USER if user is None else ENV_PASSWORD, "(unset)",
            f"basic auth needs both {ENV_USER} and {ENV_PASSWORD}",
        )
    basic = (user, password) if user is not None and password is not None else None
    return Auth(token=token, basic=basic)
