"""Who may use the reference server's doors: the REST door's browser policy, TLS, tokens.

A developer's local server is reachable by every web page their browser opens, so the
REST door refuses what only a browser acting for another site would send:

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

TLS (``--tls-cert``/``--tls-key``: both doors, one certificate) and bearer tokens
(``--auth-token-file``, ``auth.TokenTable``) are off by default; a server bound to a
non-loopback address without them says so when it starts (``exposure_warnings``).
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from eoclient.server_stub.access.limits import (
    DEFAULT_MAX_STREAMS,
    DEFAULT_MAX_STREAMS_PER_CONNECTION,
    StreamLimits,
)
from eoclient.server_stub.access.tokens import TokenTable

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
class TlsFiles:
    """A PEM certificate chain and its private key, served by both doors."""

    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        """The REST door's context; loading it first also gives a clear error for files
        that are missing or not a matching PEM pair (grpc's is only 'PEM lib')."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as error:
            raise ValueError(
                f"cannot use --tls-cert {self.cert_file} with --tls-key {self.key_file}: {error}"
            ) from error
        return context

    def grpc_pair(self) -> tuple[bytes, bytes]:
        """(private key, certificate chain) as grpc.ssl_server_credentials takes them."""
        return self.key_file.read_bytes(), self.cert_file.read_bytes()


@dataclass(frozen=True)
class DoorSecurity:
    """Everything the doors enforce about who may call them (``eoclient serve`` flags)."""

    browser: BrowserPolicy = field(default_factory=BrowserPolicy)
    tls: TlsFiles | None = None
    tokens: TokenTable | None = None
    # How much one caller may hold (not who may call, but set in the same place).
    stream_limits: StreamLimits = field(default_factory=StreamLimits)

    @property
    def rest_scheme(self) -> str:
        return "https" if self.tls is not None else "http"

    def add_grpc_port(self, server: grpc.aio.Server, address: str) -> int:
        """Bind the gRPC door (with TLS if configured); the port, or 0 if binding failed."""
        if self.tls is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, grpc.ssl_server_credentials([self.tls.grpc_pair()]))

    def rest_ssl_context(self) -> ssl.SSLContext | None:
        return None if self.tls is None else self.tls.server_context()

    @classmethod
    def from_flags(
        cls,
        *,
        allow_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
        tls_cert: str | None = None,
        tls_key: str | None = None,
        auth_token_file: str | None = None,
        max_streams_per_connection: int = DEFAULT_MAX_STREAMS_PER_CONNECTION,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> DoorSecurity:
        """The security of ``eoclient serve``'s flags (ValueError naming a bad one)."""
        if (tls_cert is None) != (tls_key is None):
            raise ValueError("--tls-cert and --tls-key go together: give both or neither")
        tls = None
        if tls_cert is not None and tls_key is not None:
            tls = TlsFiles(Path(tls_cert), Path(tls_key))
            tls.server_context()  # fail now, naming the files, not at the first call
        tokens = None
        if auth_token_file is not None:
            try:
                tokens = TokenTable.load(auth_token_file)
            except OSError as error:
                raise ValueError(f"cannot read --auth-token-file: {error}") from error
        limits = StreamLimits(max_streams_per_connection, max_streams)
        return cls(BrowserPolicy.of(allow_hosts, allow_origins), tls, tokens, limits)


def exposure_warnings(host: str, security: DoorSecurity) -> list[str]:
    """What a server bound to ``host`` should warn about: reachable from other machines
    without tokens (anyone there may read, publish, seek and delete), or with tokens sent
    in clear text."""
    name = host_name(host) if host else ""
    if name and is_loopback(name):
        return []
    where = f"{host or 'every interface'}"
    if security.tokens is None:
        return [
            f"listening on {where} without --auth-token-file: anyone who can reach this "
            "machine's ports can read, publish, seek and delete every topic and subscription"
        ]
    if security.tls is None:
        return [
            f"listening on {where} with bearer tokens but without --tls-cert/--tls-key: "
            "tokens and messages cross the network in clear text"
        ]
    return []
