"""Where a client connects and how: :class:`Endpoint`, and the channel made from one.

The rules are the official clients' (docs/protocol.md#endpoint-resolution):

* a string endpoint is the service's kind of endpoint: **TLS with Application Default
  Credentials** — unless it names this machine (a loopback address, ``localhost``, a unix
  socket) or is the value of ``PUBSUB_EMULATOR_HOST``: then it is plain text, as an
  emulator or ``eoclient serve`` speaks;
* no endpoint at all: ``PUBSUB_EMULATOR_HOST`` (plain text) if set, else the service,
  ``pubsub.<universe domain>:443`` (``googleapis.com`` unless ``universe_domain`` or
  ``GOOGLE_CLOUD_UNIVERSE_DOMAIN`` says otherwise);
* ``Endpoint.insecure(target)`` says plain text explicitly, for any host;
  ``Endpoint.tls(target, ...)`` says TLS explicitly, with the options below.

TLS options: the CA to trust (``root_certificates``), the credentials
(``google.auth`` credentials; Application Default Credentials when ``None``), a client
certificate for mutual TLS, the quota project billed for the calls (sent as
``x-goog-user-project`` by the credentials, as google-auth does for the official clients),
and the universe domain the credentials must belong to.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from typing import Any

import grpc

from eoclient.errors import CredentialsError

__all__ = [
    "CHANNEL_OPTIONS",
    "DEFAULT_UNIVERSE_DOMAIN",
    "EMULATOR_HOST_ENV",
    "LOCAL_CHANNEL_OPTIONS",
    "UNIVERSE_DOMAIN_ENV",
    "Endpoint",
    "create_channel",
    "is_local_target",
]

EMULATOR_HOST_ENV = "PUBSUB_EMULATOR_HOST"
# The official clients read the universe domain from this variable when none is passed.
UNIVERSE_DOMAIN_ENV = "GOOGLE_CLOUD_UNIVERSE_DOMAIN"
DEFAULT_UNIVERSE_DOMAIN = "googleapis.com"
_SCOPES = ("https://www.googleapis.com/auth/pubsub",)

# Received metadata (headers + trailers) a channel accepts
# (docs/protocol.md#rich-status-trailer). gRPC's default is 16 KiB, but an exactly-once
# Acknowledge / ModifyAckDeadline that fails lists every failed id in the ErrorInfo of its
# grpc-status-details-bin trailer: ~56 bytes an id on our server, up to ~200 on the
# service (ack ids of up to 164 bytes), so a few hundred failed ids overflow 16 KiB and the
# answer is lost as a local RESOURCE_EXHAUSTED. At our 2,500 ids a request the trailer
# stays under ~700 KiB (base64 of 2,500 × ~200 bytes); 4 MiB is the value
# google-cloud-pubsub's GAPIC transports set (pubsub_v1/services/*/transports/grpc.py,
# "grpc.max_metadata_size").
MAX_METADATA_BYTES = 4 * 1024 * 1024

# Channel options, as the official clients set them (docs/protocol.md#channel-options):
# no size limit on messages (publish requests reach 10 MB; streaming responses are sized
# by the server), room for large error trailers, and a 30 s keepalive so idle streams
# survive NATs and proxies.
CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    ("grpc.max_send_message_length", -1),
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_metadata_size", MAX_METADATA_BYTES),
    ("grpc.keepalive_time_ms", 30_000),
)

# A plain-text endpoint is an emulator or a reference server, which developers stop and
# start: gRPC's default reconnect backoff (1 s growing to 120 s) would leave a client
# failing fast for up to two minutes after the server came back. Capped at 1 s here, so
# clients reconnect within about a second of a restart; TLS endpoints (the service)
# keep gRPC's defaults.
LOCAL_CHANNEL_OPTIONS: tuple[tuple[str, Any], ...] = (
    *CHANNEL_OPTIONS,
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
    # Not grpc.min_reconnect_backoff_ms: gRPC also uses it as the connection attempt's
    # timeout (20 s by default), and a short one fails a slow server's handshake
    # ("timed out before receiving SETTINGS frame", seen with Google's emulator).
)


def is_local_target(target: str) -> bool:
    """Whether a gRPC target names this machine: a loopback or unspecified address
    (``127.0.0.1``, ``[::1]``, ``0.0.0.0``), ``localhost``, or a unix socket."""
    if target.startswith(("unix:", "unix-abstract:")):
        return True
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme) :]
            break
    if target.startswith("["):  # [v6 address]:port
        host = target[1 : target.find("]")] if "]" in target else target[1:]
    elif target.count(":") == 1:  # host:port
        host = target.partition(":")[0]
    else:  # a bare v6 address, or a host without a port
        host = target
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _universe_domain(universe_domain: str | None) -> str:
    domain = universe_domain or os.environ.get(UNIVERSE_DOMAIN_ENV) or DEFAULT_UNIVERSE_DOMAIN
    if not domain.strip():
        raise ValueError("universe_domain must not be empty")
    return domain


@dataclass(frozen=True)
class Endpoint:
    """Where to connect, and how; every client takes one as ``endpoint=``.

    ::

        Endpoint.resolve("us-east1-pubsub.googleapis.com:443")   # TLS + ADC
        Endpoint.insecure("pubsub-emulator:8085")                 # plain text, any host
        Endpoint.tls("pubsub.internal:8443", root_certificates=ca_pem, credentials=creds,
                     client_certificate=(chain_pem, key_pem), quota_project="billing")
        Endpoint.service(universe_domain="example-universe.com")

    Attributes:
        target: a gRPC target, ``host:port``.
        secure: TLS with credentials, or plain text (no credentials are ever sent then).
        root_certificates: PEM of the CAs to trust instead of the system's (a private CA).
        credentials: ``google.auth`` credentials (e.g. ``google.oauth2.credentials.
            Credentials(token)`` for a static bearer token,
            ``google.auth.credentials.AnonymousCredentials()`` for none);
            ``None`` = Application Default Credentials.
        client_certificate_chain / client_private_key: PEM, for mutual TLS.
        quota_project: the project billed for the calls (``x-goog-user-project``).
        universe_domain: the universe the credentials must belong to (checked when the
            channel is made, as the official clients check it).
    """

    target: str
    secure: bool
    root_certificates: bytes | None = None
    credentials: Any = None
    client_certificate_chain: bytes | None = None
    client_private_key: bytes | None = field(default=None, repr=False)
    quota_project: str | None = None
    universe_domain: str = DEFAULT_UNIVERSE_DOMAIN

    def __post_init__(self) -> None:
        if not isinstance(self.target, str) or not self.target:
            raise ValueError(f"an endpoint needs a target, 'host:port'; got {self.target!r}")
        if (self.client_certificate_chain is None) != (self.client_private_key is None):
            raise ValueError("a client certificate needs both its chain and its private key (PEM)")
        if not self.secure:
            given = [
                name
                for name in (
                    "root_certificates",
                    "credentials",
                    "client_certificate_chain",
                    "quota_project",
                )
                if getattr(self, name) is not None
            ]
            if given:
                raise ValueError(
                    f"a plain-text endpoint cannot carry {', '.join(given)} (plain text sends "
                    f"no credentials); use Endpoint.tls({self.target!r}, ...)"
                )

    # ------------------------------------------------------------ constructors

    @classmethod
    def tls(
        cls,
        target: str,
        *,
        root_certificates: bytes | None = None,
        credentials: Any = None,
        client_certificate: tuple[bytes, bytes] | None = None,
        quota_project: str | None = None,
        universe_domain: str | None = None,
    ) -> Endpoint:
        """TLS to ``target``; ``client_certificate`` = ``(chain_pem, private_key_pem)``."""
        chain, key = client_certificate if client_certificate is not None else (None, None)
        return cls(
            target,
            secure=True,
            root_certificates=root_certificates,
            credentials=credentials,
            client_certificate_chain=chain,
            client_private_key=key,
            quota_project=quota_project,
            universe_domain=_universe_domain(universe_domain),
        )

    @classmethod
    def insecure(cls, target: str) -> Endpoint:
        """Plain text to ``target``, whatever host it names (an emulator in a container,
        ``eoclient serve`` on another machine)."""
        return cls(target, secure=False)

    @classmethod
    def service(
        cls,
        *,
        universe_domain: str | None = None,
        credentials: Any = None,
        client_certificate: tuple[bytes, bytes] | None = None,
        quota_project: str | None = None,
    ) -> Endpoint:
        """The Pub/Sub service of a universe: ``pubsub.<domain>:443``, or its mutual-TLS
        endpoint ``pubsub.mtls.googleapis.com:443`` with a client certificate (which the
        official clients offer in the default universe only)."""
        domain = _universe_domain(universe_domain)
        host = f"pubsub.{domain}"
        if client_certificate is not None:
            if domain != DEFAULT_UNIVERSE_DOMAIN:
                raise ValueError(
                    f"mutual TLS is offered in the {DEFAULT_UNIVERSE_DOMAIN} universe only, "
                    f"not in {domain!r}"
                )
            host = f"pubsub.mtls.{domain}"
        return cls.tls(
            f"{host}:443",
            credentials=credentials,
            client_certificate=client_certificate,
            quota_project=quota_project,
            universe_domain=domain,
        )

    @classmethod
    def resolve(cls, endpoint: str | Endpoint | None = None) -> Endpoint:
        """What a client's ``endpoint=`` means (the module docstring's rules)."""
        if isinstance(endpoint, Endpoint):
            return endpoint
        emulator = os.environ.get(EMULATOR_HOST_ENV)
        if endpoint is not None and not isinstance(endpoint, str):
            raise TypeError(f"endpoint must be 'host:port', an Endpoint or None; got {endpoint!r}")
        if endpoint:
            if endpoint == emulator or is_local_target(endpoint):
                return cls.insecure(endpoint)
            return cls.tls(endpoint)
        if emulator:
            return cls.insecure(emulator)
        return cls.service()

    # ------------------------------------------------------------ channel

    def create_channel(self) -> grpc.aio.Channel:
        """A new channel to this endpoint (to share between clients: pass it as their
        ``channel=``; whoever creates it closes it)."""
        if not self.secure:
            return grpc.aio.insecure_channel(self.target, options=LOCAL_CHANNEL_OPTIONS)
        channel_credentials = grpc.composite_channel_credentials(
            grpc.ssl_channel_credentials(
                root_certificates=self.root_certificates,
                private_key=self.client_private_key,
                certificate_chain=self.client_certificate_chain,
            ),
            grpc.metadata_call_credentials(self._auth_plugin()),
        )
        return grpc.aio.secure_channel(self.target, channel_credentials, options=CHANNEL_OPTIONS)

    def _auth_plugin(self) -> Any:
        try:
            import google.auth  # type: ignore[import-untyped, unused-ignore]
            import google.auth.exceptions  # type: ignore[import-untyped, unused-ignore]
            import google.auth.transport.grpc  # type: ignore[import-untyped, unused-ignore]
            import google.auth.transport.requests  # type: ignore[import-untyped, unused-ignore]
        except ImportError as error:  # pragma: no cover - depends on the environment
            raise CredentialsError(
                f"{self.target} is a TLS endpoint, and TLS with credentials needs "
                "google-auth and requests: pip install 'eoclient[gcp]' (or, for a plain-text "
                f"server, Endpoint.insecure({self.target!r}) or PUBSUB_EMULATOR_HOST)"
            ) from error
        credentials = self.credentials
        if credentials is None:
            try:
                credentials, _ = google.auth.default(
                    scopes=_SCOPES, quota_project_id=self.quota_project
                )
            except google.auth.exceptions.DefaultCredentialsError as error:
                raise CredentialsError(
                    f"{self.target} is a TLS endpoint and Application Default Credentials "
                    f"found none ({error}): run `gcloud auth application-default login` or "
                    "pass credentials with Endpoint.tls(...); for a plain-text server (an "
                    f"emulator, eoclient serve) use Endpoint.insecure({self.target!r}) or set "
                    "PUBSUB_EMULATOR_HOST (a string endpoint is TLS unless it is a loopback "
                    "address)"
                ) from error
        elif self.quota_project is not None:
            with_quota_project = getattr(credentials, "with_quota_project", None)
            if with_quota_project is None:
                raise CredentialsError(
                    f"credentials of type {type(credentials).__name__} cannot carry a quota "
                    f"project ({self.quota_project!r}): use google.auth credentials that "
                    "support with_quota_project()"
                )
            credentials = with_quota_project(self.quota_project)
        theirs = getattr(credentials, "universe_domain", DEFAULT_UNIVERSE_DOMAIN)
        if theirs != self.universe_domain:
            raise CredentialsError(
                f"the endpoint's universe domain ({self.universe_domain!r}) does not match "
                f"the credentials' ({theirs!r})"
            )
        # gRPC calls the plugin on a thread of its own and the plugin refreshes an expired
        # token there (google.auth.transport.grpc.AuthMetadataPlugin): a refresh, a blocking
        # HTTP request, never stalls the event loop (tests/server_stub/access/test_secure_sdk.py).
        return google.auth.transport.grpc.AuthMetadataPlugin(  # type: ignore[no-untyped-call, unused-ignore]
            credentials, google.auth.transport.requests.Request()
        )


def create_channel(endpoint: Endpoint) -> grpc.aio.Channel:
    """``endpoint.create_channel()``."""
    return endpoint.create_channel()
