"""Login sessions: the signed cookie a token sign-in sets, and its end at sign-out.

Owns the cookie's format, ``<token name>.<session id>.<issued>.<hmac>``, signed with a
key derived from that token (so every replica with the same tokens accepts it, and
changing a token ends its sessions), and the revoked session ids: a sign-out revokes
its session on the server, so the old cookie is refused even if it is replayed.
Revocations live in this process until the session would have expired anyway.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable

from kiln.web._auth import Auth, Identity, same

SESSION_COOKIE = "kiln_session"
SESSION_MAX_AGE = 12 * 3600
CLOCK_SKEW = 60  # seconds a cookie may seem issued in the future (replicas' clocks)


class Sessions:
    def __init__(self, auth: Auth, clock: Callable[[], float] = time.time) -> None:
        self._auth = auth
        self._clock = clock
        self._revoked: dict[str, float] = {}  # session id -> when its cookie expires

    def _sign(self, name: str, body: str) -> str | None:
        token = self._auth.named.get(name)
        if token is None:
            return None
        key = hashlib.sha256(b"kiln-dashboard-session\x00" + token.encode()).digest()
        return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()

    def issue(self, name: str) -> str:
        """A new session for the token called ``name``, as the cookie's value."""
        body = f"{name}.{secrets.token_urlsafe(18)}.{int(self._clock())}"
        sig = self._sign(name, body)
        assert sig is not None, "sessions are issued for configured tokens only"
        return f"{body}.{sig}"

    def _parse(self, value: str) -> tuple[str, str, int] | None:
        parts = value.split(".")
        if len(parts) != 4 or not (parts[2].isascii() and parts[2].isdigit()):
            return None
        name, sid, issued, sig = parts
        want = self._sign(name, f"{name}.{sid}.{issued}")
        if want is None or not same(sig, want):
            return None
        age = self._clock() - int(issued)
        if not -CLOCK_SKEW <= age <= SESSION_MAX_AGE:
            return None
        return name, sid, int(issued)

    def identify(self, value: str) -> Identity | None:
        """The identity of a live session cookie; None if forged, expired or signed out."""
        parsed = self._parse(value) if value else None
        if parsed is None or parsed[1] in self._revoked:
            return None
        return Identity(parsed[0], "session", parsed[1])

    def revoke(self, value: str) -> bool:
        """End the cookie's session; False when it named no live session."""
        parsed = self._parse(value) if value else None
        if parsed is None:
            return False
        now = self._clock()
        self._revoked = {s: t for s, t in self._revoked.items() if t > now}
        self._revoked[parsed[1]] = parsed[2] + SESSION_MAX_AGE
        return True
