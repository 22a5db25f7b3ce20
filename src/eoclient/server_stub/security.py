"""Who may use the reference server's doors: the browser policy of the REST door.

A developer's local server is reachable by every web page their browser opens, so the
REST door refuses what only a browser acting for another site would send (issue 13):

* **Content-Type**: a request must say ``application/json`` (or carry no Content-Type and
  no body). ``text/plain``, ``application/x-www-form-urlencoded`` and
  ``multipart/form-data`` are what a cross-site page may send without a CORS preflight
  (a "simple request", Fetch standard §3.2.3); refusing them refuses form posts and
  no-cors fetches that could publish, pull (stealing leases), seek or detach.
* **Host**: a loopback address (127.0.0.0/8, ::1), ``localhost`` (and ``*.localhost``,
  RFC 6761 §6.3: browsers resolve them to loopback themselves), the address the door is
  bound to, or a name configured with ``--allow-host``. DNS rebinding points a name the
  attacker owns at 127.0.0.1, so the browser sends that name as Host: it is refused.
* **Origin**: browsers send it on every cross-origin request and on every POST/PUT/PATCH/
  DELETE; when present it must be on the allow-list (``--allow-origin``, empty by
  default) or be the server's own origin (a page the server itself serves). curl and the
  SDKs send no Origin and are not affected. Allowed cross-origin callers get CORS
  headers, including answers to preflight requests.

The gRPC door needs no such policy: a browser cannot speak gRPC (HTTP/2 with trailers and
``application/grpc``, which needs a preflight the door never answers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass, field

# Methods and request headers allowed cross-origin callers may use (CORS preflight
# answers): the REST door's HTTP methods, and the headers its clients send.
CORS_METHODS = "GET, POST, PUT, PATCH, DELETE"
CORS_HEADERS = "Authorization, Content-Type, Content-Encoding, X-Goog-Api-Client"
CORS_MAX_AGE_SECONDS = 600  # browsers cap it anyway (Chromium: 2 hours)
JSON_MEDIA_TYPE = "application/json"


def host_name(host_header: str) -> str:
    """The name or address of a Host header, without port, brackets or trailing dot."""
    host = host_header.strip().lower()
    if host.startswith("["):  # [::1]:8086
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") == 1:  # name:port or 1.2.3.4:port (a bare IPv6 has several)
        host = host.split(":", 1)[0]
    return host.rstrip(".")


def is_loopback(name: str) -> bool:
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin_key(origin: str) -> str:
    return origin.strip().lower().rstrip("/")


@dataclass(frozen=True)
class BrowserPolicy:
    """The REST door's rules for Host, Origin and Content-Type (see the module docstring).

    ``allowed_hosts``: names or addresses accepted in Host besides loopback ones;
    ``allowed_origins``: origins (``scheme://host[:port]``) allowed to call cross-origin.
    """

    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    allowed_origins: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of(cls, hosts: Iterable[str] = (), origins: Iterable[str] = ()) -> BrowserPolicy:
        return cls(
            frozenset(host_name(host) for host in hosts),
            frozenset(_origin_key(origin) for origin in origins),
        )

    def with_host(self, host: str) -> BrowserPolicy:
        """Also accept ``host`` (the address the door is bound to, unless a wildcard)."""
        name = host_name(host)
        if name in ("", "0.0.0.0", "::"):
            return self
        return BrowserPolicy(self.allowed_hosts | {name}, self.allowed_origins)

    def host_refusal(self, host_header: str | None) -> str | None:
        """Why the Host header is refused, or None. No Host at all is not a browser
        (every browser sends one): allowed."""
        if host_header is None:
            return None
        name = host_name(host_header)
        if is_loopback(name) or name in self.allowed_hosts:
            return None
        return (
            f"Host {host_header!r} is not allowed: the REST door answers requests for "
            "loopback addresses, the address it is bound to and names given with "
            "--allow-host (a guard against DNS rebinding)."
        )

    def origin_allowed(self, origin: str, own_origin: str) -> bool:
        key = _origin_key(origin)
        return key == _origin_key(own_origin) or key in self.allowed_origins

    def origin_refusal(self, origin: str | None, own_origin: str) -> str | None:
        if origin is None or self.origin_allowed(origin, own_origin):
            return None
        return (
            f"Origin {origin!r} is not allowed: web pages of other sites may not use the "
            "REST door (add trusted origins with --allow-origin)."
        )

    @staticmethod
    def content_type_refusal(content_type: str | None, has_body: bool) -> str | None:
        """Why the Content-Type is refused (JSON, or none with an empty body), or None."""
        if content_type is None or not content_type.strip():
            if not has_body:
                return None
            return "A request with a body must have Content-Type: application/json."
        media_type = content_type.split(";", 1)[0].strip().lower()
        if media_type == JSON_MEDIA_TYPE:
            return None
        return (
            f"Content-Type {content_type!r} is not accepted: the REST door takes "
            "application/json only (other types are what cross-site forms can send)."
        )


@dataclass(frozen=True)
class DoorSecurity:
    """Everything the doors enforce about who may call them (``eoclient serve`` flags)."""

    browser: BrowserPolicy = field(default_factory=BrowserPolicy)
