"""Which Host names the dashboard answers to, and which POSTs come from its own pages.

Owns the DNS-rebinding defence (a Host allowlist: a page whose name re-resolves to
127.0.0.1 sends its own name as Host and is refused) and the same-origin rule for
state changes (Origin, else Referer, must be this dashboard's scheme, host and port).
Knows nothing about credentials or pages.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from urllib.parse import urlsplit

from kiln._errors import ConfigError

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443}
_NAME = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?")


def split_host(value: str) -> tuple[str, int | None] | None:
    """A Host header (or an origin's netloc) as (lower-case name, port); None if malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        name, rest = value[1:end], value[end + 1:]
        if end < 0 or not _is_ip(name) or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, sep, port_text = value.partition(":")
        port_text = port_text if sep else None
    if port_text is not None and not (port_text.isascii() and port_text.isdigit()
                                      and 0 < len(port_text) <= 5 and int(port_text) < 65536):
        return None
    if not name or not (_is_ip(name) or _NAME.fullmatch(name)):
        return None
    return name.rstrip("."), int(port_text) if port_text is not None else None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class AllowedHosts:
    """The loopback names plus the configured ones; any port.

    An entry is a host name or address (``kiln.example.com``, ``10.0.0.5``), a
    ``*.example.com`` wildcard for its sub-domains, or ``*`` for any name, which turns
    the DNS-rebinding defence off and is refused unless the dashboard has credentials.
    """

    def __init__(self, extra: Iterable[str] = ()) -> None:
        self.names = set(LOOPBACK_HOSTS)
        self.suffixes: list[str] = []
        self.any = False
        for entry in extra:
            self._add(entry)

    def _add(self, entry: str) -> None:
        raw = entry.strip().lower()
        if raw == "*":
            self.any = True
            return
        wildcard = raw.startswith("*.")
        parsed = split_host(raw[2:] if wildcard else raw)
        if parsed is None or parsed[1] is not None:
            raise ConfigError(
                "allowed_hosts", entry,
                "give a host name or address without scheme, port or path "
                "(kiln.example.com, 10.0.0.5, *.example.com, or *)",
            )
        if wildcard:
            self.suffixes.append("." + parsed[0])
        else:
            self.names.add(parsed[0])

    def allows(self, host_header: str) -> bool:
        parsed = split_host(host_header)
        if parsed is None:
            return False
        name = parsed[0]
        return self.any or name in self.names or any(name.endswith(s) for s in self.suffixes)


def origin_refusal(scheme: str, host_header: str, origin: str | None,
                   referer: str | None) -> str | None:
    """Why a POST is not from this dashboard's own origin, or None when it is.

    Browsers send Origin with every POST (Referer as a fallback in older ones); a
    request with neither is no browser's cross-site form, and still needs its CSRF token.
    """
    claimed = origin if origin is not None else referer
    if claimed is None:
        return None
    if claimed == "null":
        return "the request comes from an opaque origin (Origin: null)"
    parts = urlsplit(claimed)
    theirs = split_host(parts.netloc) if parts.scheme in DEFAULT_PORTS else None
    ours = split_host(host_header)
    if theirs is None or ours is None:
        return f"the origin {claimed[:100]!r} is not a URL this dashboard serves"
    their_port = theirs[1] or DEFAULT_PORTS[parts.scheme]
    our_port = ours[1] or DEFAULT_PORTS.get(scheme, 80)
    if (parts.scheme, theirs[0], their_port) != (scheme, ours[0], our_port):
        hint = (" (behind a TLS proxy, set trusted_proxies / --trusted-proxy)"
                if parts.scheme == "https" and scheme == "http" else "")
        return (f"the request comes from {parts.scheme}://{parts.netloc[:100]}, "
                f"not from this dashboard at {scheme}://{host_header[:100]}{hint}")
    return None
