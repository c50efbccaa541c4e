"""CSRF protection: a signed double-submit token, bound to the credential that got it.

A random nonce lives in a SameSite=Strict, HttpOnly cookie; every form carries
HMAC(secret, nonce, binding), where the binding names the credential and session the
page was rendered for (kiln.web._auth.Identity.binding). A POST is accepted only when
the form field (or the X-CSRF-Token header) matches the HMAC of the cookie it arrived
with and of the credential it presents, so a page on another site can neither read
the token nor forge one, even if it plants a cookie, and a token an anonymous visitor
got from /login works with no one's session or bearer token. Owns the cookie and the
check, nothing else.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

CSRF_COOKIE = "kiln_csrf"
CSRF_FIELD = "csrf"
CSRF_HEADER = "x-csrf-token"


class Csrf:
    def __init__(self, secret: bytes | None = None) -> None:
        self._secret = secret or secrets.token_bytes(32)

    @staticmethod
    def new_nonce() -> str:
        return secrets.token_urlsafe(24)

    def token_for(self, nonce: str, binding: str) -> str:
        message = nonce.encode() + b"\x00" + binding.encode("utf-8", "surrogatepass")
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def valid(self, nonce: str, submitted: str | None, binding: str) -> bool:
        """Whether ``submitted`` is the token of the cookie's ``nonce`` and ``binding``."""
        if len(nonce) < 16 or not submitted:
            return False
        return hmac.compare_digest(self.token_for(nonce, binding).encode(),
                                   submitted.encode("utf-8", "replace"))
