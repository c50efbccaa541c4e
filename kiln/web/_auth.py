"""Who may use the dashboard: named bearer tokens (header or login cookie) or HTTP basic auth.

Owns the credential rules (checked at start-up, so a weak secret never serves a
request: long enough, varied enough, not a well-known one: kiln.web._weak_secrets),
checking what a request presents, and reading credentials from the
environment. Comparisons are constant-time. Knows nothing about pages or the store;
the login cookie is kiln.web._sessions'.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Mapping

from kiln._errors import ConfigError
from kiln.web._weak_secrets import well_known

ENV_TOKEN = "KILN_DASHBOARD_TOKEN"
ENV_TOKENS = "KILN_DASHBOARD_TOKENS"
ENV_USER = "KILN_DASHBOARD_USER"
ENV_PASSWORD = "KILN_DASHBOARD_PASSWORD"
DEFAULT_TOKEN_NAME = "token"
TOKEN_MIN, TOKEN_DISTINCT = 16, 8
PASSWORD_MIN, PASSWORD_DISTINCT = 12, 6
TOKEN_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
TOKEN_RULE = (f"a dashboard token needs at least {TOKEN_MIN} characters, {TOKEN_DISTINCT} of "
              "them different, and no whitespace or control characters (make one with "
              "python -c 'import secrets; print(secrets.token_urlsafe(24))')")
PASSWORD_RULE = (f"a dashboard password needs at least {PASSWORD_MIN} characters, "
                 f"{PASSWORD_DISTINCT} of them different, not only whitespace")
WELL_KNOWN_RULE = ("a dashboard {what} must not be a well-known one (common password words, "
                   "the user or token name, a keyboard run, only digits): this one is {why}. "
                   "Make one with python -c 'import secrets; print(secrets.token_urlsafe(24))'")


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    """Who a request acts as: a token's name, a basic-auth user, or anonymous."""

    user: str
    via: str  # anonymous, bearer, basic or session
    session: str = ""  # the id of a login cookie's session

    @property
    def binding(self) -> str:
        """What a CSRF token is bound to: this credential, and this session."""
        return f"{self.via}\x00{self.user}\x00{self.session}"


ANONYMOUS = Identity("anonymous", "anonymous")


def _strong(secret: str, minimum: int, distinct: int, whitespace: bool) -> bool:
    if len(secret) < minimum or len(set(secret)) < distinct or not secret.strip():
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in secret):
        return False
    return whitespace or not any(c.isspace() for c in secret)


def _check_tokens(named: Mapping[str, str]) -> None:
    seen: set[str] = set()
    for name, token in named.items():
        if not TOKEN_NAME.fullmatch(name):
            raise ConfigError("tokens", name, "a token name is 1-64 of A-Z a-z 0-9 _ -")
        if not _strong(token, TOKEN_MIN, TOKEN_DISTINCT, whitespace=False):
            raise ConfigError("token", f"{name}=***", TOKEN_RULE)
        why = well_known(token, name)
        if why is not None:
            raise ConfigError("token", f"{name}=***", WELL_KNOWN_RULE.format(what="token", why=why))
        if token in seen:
            raise ConfigError("tokens", name, "two token names share one token")
        seen.add(token)


def _check_basic(user: str, password: str) -> None:
    if not user or ":" in user or any(ord(c) < 32 for c in user) or user != user.strip():
        raise ConfigError("basic_auth", (user[:64], "***"),
                          "the user name must be non-empty, without ':', control "
                          "characters or surrounding spaces")
    if not _strong(password, PASSWORD_MIN, PASSWORD_DISTINCT, whitespace=True):
        raise ConfigError("basic_auth", (user[:64], "***"), PASSWORD_RULE)
    why = well_known(password, user)
    if why is not None:
        raise ConfigError("basic_auth", (user[:64], "***"),
                          WELL_KNOWN_RULE.format(what="password", why=why))


@dataclasses.dataclass(frozen=True)
class Auth:
    """The configured credentials; with none, everyone is let in (loopback only).

    ``token`` is one token named ``token``; ``tokens`` maps names to tokens, so the
    audit log says whose token acted.
    """

    token: str | None = None
    basic: tuple[str, str] | None = None
    tokens: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        _check_tokens(self.named)
        if len(self.named) != len(self.tokens) + (self.token is not None):
            raise ConfigError("tokens", DEFAULT_TOKEN_NAME, "the name is taken by token=")
        if self.basic is not None:
            _check_basic(*self.basic)

    def __repr__(self) -> str:  # never print secrets
        names = ",".join(self.named) or None
        return f"Auth(tokens={names}, basic={'set' if self.basic else None})"

    @property
    def named(self) -> dict[str, str]:
        """Every token by its name."""
        named = dict(self.tokens)
        if self.token is not None:
            named[DEFAULT_TOKEN_NAME] = self.token
        return named

    @property
    def enabled(self) -> bool:
        return bool(self.named) or self.basic is not None

    @property
    def has_tokens(self) -> bool:
        return bool(self.named)

    @staticmethod
    def presented(headers: Mapping[str, str]) -> bool:
        """Whether the request brings credentials of its own (to count a failure)."""
        return bool(headers.get("authorization", "").strip())

    def identify(self, headers: Mapping[str, str]) -> Identity | None:
        """Who the Authorization header names, or None (no header, or a wrong one)."""
        scheme, _, value = headers.get("authorization", "").partition(" ")
        scheme = scheme.lower()
        if scheme == "bearer":
            name = self.token_name(value.strip())
            return Identity(name, "bearer") if name is not None else None
        if self.basic is not None and scheme == "basic":
            user = self._basic_user(value.strip())
            return Identity(user, "basic") if user is not None else None
        return None

    def attempted_user(self, headers: Mapping[str, str]) -> str:
        """The user name a failed basic-auth attempt claimed, for the audit log."""
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return ""
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return ""
        return decoded.partition(":")[0][:64]

    def _basic_user(self, value: str) -> str | None:
        assert self.basic is not None
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        ok_user = same(user, self.basic[0])
        ok_password = same(password, self.basic[1])
        return user if sep and ok_user and ok_password else None

    def token_name(self, candidate: str) -> str | None:
        """The name of the token ``candidate`` is; every token is compared, in constant time."""
        found = None
        for name, token in self.named.items():
            if same(candidate, token):
                found = name
        return found


def same(a: str, b: str) -> bool:
    """Constant-time equality that leaks neither content nor length."""
    left = hashlib.sha256(a.encode("utf-8", "surrogatepass")).digest()
    right = hashlib.sha256(b.encode("utf-8", "surrogatepass")).digest()
    return hmac.compare_digest(left, right)


def _tokens_from(value: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in value.split(","):
        if not item.strip():
            continue
        name, sep, token = item.strip().partition("=")
        if not sep:
            raise ConfigError(ENV_TOKENS, name[:64], "give name=token pairs, comma-separated")
        pairs.append((name, token))
    return tuple(pairs)


def auth_from_env(environ: Mapping[str, str] | None = None) -> Auth:
    """KILN_DASHBOARD_TOKEN and/or KILN_DASHBOARD_TOKENS (``name=token,...``), and/or
    KILN_DASHBOARD_USER with KILN_DASHBOARD_PASSWORD."""
    env = os.environ if environ is None else environ
    token = env.get(ENV_TOKEN) or None
    user, password = env.get(ENV_USER) or None, env.get(ENV_PASSWORD) or None
    if (user is None) != (password is None):
        raise ConfigError(
            ENV_USER if user is None else ENV_PASSWORD, "(unset)",
            f"basic auth needs both {ENV_USER} and {ENV_PASSWORD}",
        )
    basic = (user, password) if user is not None and password is not None else None
    return Auth(token=token, basic=basic, tokens=_tokens_from(env.get(ENV_TOKENS, "")))
