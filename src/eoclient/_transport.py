"""The gRPC transport: channel creation, typed calls, and the one place errors are mapped.

Every google.pubsub.v1 call the SDK makes goes through ``PubSubTransport``; every
``grpc.aio.AioRpcError`` becomes an ``eoclient.errors.RpcError`` in
``rpc_error_from_grpc`` (architecture principle 8), with the ErrorInfo of a
``grpc-status-details-bin`` trailer decoded (wire-contract §2.2).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError, StreamClosedError, rpc_error_class

EMULATOR_HOST_ENV = "PUBSUB_EMULATOR_HOST"
DEFAULT_ENDPOINT = "pubsub.googleapis.com:443"
_SCOPES = ("https://www.googleapis.com/auth/pubsub",)

# Received metadata (headers + trailers) a channel accepts. gRPC's default is 16 KiB,
# but an exactly-once Acknowledge / ModifyAckDeadline that fails lists every failed id
# in the ErrorInfo of its grpc-status-details-bin trailer: ~56 bytes an id on our
# server, up to ~200 on the service (ack ids of up to 164 bytes, client-anchors §3.3),
# so a few hundred failed ids overflow 16 KiB and the answer is lost as a local
# RESOURCE_EXHAUSTED (issue 17). At our 2,500 ids a request the trailer stays under
# ~700 KiB (base64 of 2,500 × ~200 bytes); 4 MiB is the value google-cloud-pubsub's
# GAPIC transports set (pubsub_v1/services/*/transports/grpc.py, "grpc.max_metadata_size").
MAX_METADATA_BYTES = 4 * 1024 * 1024

# Channel options, as the official clients set them (client-anchors §1.7): no size
# limit on messages (publish requests reach 10 MB; streaming responses are sized by
# the server), room for large error trailers, and a 30 s keepalive so idle streams
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

ResponseT = TypeVar("ResponseT", bound=Message)


@dataclass(frozen=True)
class Endpoint:
    """Where to connect, and how.

    ``secure``: TLS, with ``root_certificates`` (PEM) to trust instead of the system's
    (a private CA), and ``credentials`` (a ``google.auth.credentials.Credentials``; e.g.
    ``google.oauth2.credentials.Credentials(token)`` for a static bearer token) instead of
    Application Default Credentials. Without TLS no credentials are sent.

    The clients take one as ``endpoint=`` (a plain string is a plain-text server)::

        Endpoint.tls("pubsub.internal:8443", root_certificates=ca_pem, credentials=creds)
    """

    target: str
    secure: bool
    root_certificates: bytes | None = None
    credentials: Any = None

    @classmethod
    def tls(
        cls, target: str, *, root_certificates: bytes | None = None, credentials: Any = None
    ) -> Endpoint:
        return cls(
            target, secure=True, root_certificates=root_certificates, credentials=credentials
        )

    @classmethod
    def resolve(cls, endpoint: str | Endpoint | None = None) -> Endpoint:
        """``endpoint`` if given (a string: plain text), else PUBSUB_EMULATOR_HOST, else
        the service."""
        if isinstance(endpoint, Endpoint):
            return endpoint
        if endpoint:
            return cls(endpoint, secure=False)
        emulator = os.environ.get(EMULATOR_HOST_ENV)
        if emulator:
            return cls(emulator, secure=False)
        return cls(DEFAULT_ENDPOINT, secure=True)


def create_channel(endpoint: Endpoint) -> grpc.aio.Channel:
    if not endpoint.secure:
        return grpc.aio.insecure_channel(endpoint.target, options=LOCAL_CHANNEL_OPTIONS)
    try:
        import google.auth  # type: ignore[import-untyped, unused-ignore]
        import google.auth.transport.grpc  # type: ignore[import-untyped, unused-ignore]
        import google.auth.transport.requests  # type: ignore[import-untyped, unused-ignore]
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "Connecting with TLS and credentials needs google-auth and requests: "
            "pip install 'eoclient[gcp]' (or set PUBSUB_EMULATOR_HOST for a local server)."
        ) from error
    credentials = endpoint.credentials
    if credentials is None:
        credentials, _ = google.auth.default(scopes=_SCOPES)
    # gRPC calls the plugin on a thread of its own and the plugin refreshes an expired
    # token there (google.auth.transport.grpc.AuthMetadataPlugin): a refresh, a blocking
    # HTTP request, never stalls the event loop (tests/server_stub/access/test_secure_sdk.py).
    plugin = google.auth.transport.grpc.AuthMetadataPlugin(  # type: ignore[no-untyped-call, unused-ignore]
        credentials, google.auth.transport.requests.Request()
    )
    channel_credentials = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(root_certificates=endpoint.root_certificates),
        grpc.metadata_call_credentials(plugin),
    )
    return grpc.aio.secure_channel(endpoint.target, channel_credentials, options=CHANNEL_OPTIONS)


def rpc_error_from_grpc(error: grpc.aio.AioRpcError) -> RpcError:
    """The eoclient error for a failed call, with its ErrorInfo when the server sent one."""
    code = error.code().name
    message = error.details() or ""
    reason = ""
    metadata: dict[str, str] = {}
    trailers: Any = error.trailing_metadata() or ()
    for key, value in trailers:
        if key != "grpc-status-details-bin" or not isinstance(value, bytes):
            continue
        try:
            status = status_pb2.Status.FromString(value)
        except DecodeError:
            break
        # Like the official client, read only the first detail, and only if it is
        # an ErrorInfo (wire-contract §1.6).
        if status.details and status.details[0].Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            status.details[0].Unpack(info)
            reason = info.reason
            metadata = dict(info.metadata)
        break
    # The class depends on the message too: a size-limit RESOURCE_EXHAUSTED raised by the
    # gRPC stack is permanent, a quota one is not (errors.py, the classification table).
    return rpc_error_class(code, message)(message, reason=reason, error_info=metadata)


def _routing(resource_field: str, name: str) -> tuple[tuple[str, str], ...]:
    # Routing header the service uses to find the resource (client-anchors §1.9).
    return (("x-goog-request-params", f"{resource_field}={name}"),)


class PubSubTransport:
    """Typed google.pubsub.v1 calls over one channel; errors raised as ``RpcError``."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.channel = channel
        self._calls: dict[str, Any] = {}

    async def close(self) -> None:
        await self.channel.close(None)

    def _unary(self, service: str, method: str, response: type[ResponseT]) -> Any:
        # "Publisher" is google.pubsub.v1's; a full name ("google.iam.v1.IAMPolicy") as is.
        package = "" if "." in service else "google.pubsub.v1."
        key = f"/{package}{service}/{method}"
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = self.channel.unary_unary(
                key,
                request_serializer=_serialize,
                response_deserializer=response.FromString,
            )
        return call

    async def call(
        self,
        service: str,
        method: str,
        request: Message,
        response: type[ResponseT],
        *,
        routing: tuple[str, str] | None = None,
        timeout: float | None = 60.0,
    ) -> ResponseT:
        metadata = _routing(*routing) if routing else None
        try:
            result = await self._unary(service, method, response)(
                request, timeout=timeout, metadata=metadata
            )
        except grpc.aio.AioRpcError as error:
            raise rpc_error_from_grpc(error) from error
        assert isinstance(result, response)
        return result

    # ------------------------------------------------------------ subscriber

    # These four are ``subscriber.transport.SubscriberTransport``.

    async def acknowledge(
        self, subscription: str, ack_ids: Sequence[str], *, timeout: float | None = 60.0
    ) -> None:
        await self.call(
            "Subscriber",
            "Acknowledge",
            pubsub_pb2.AcknowledgeRequest(subscription=subscription, ack_ids=ack_ids),
            empty_pb2.Empty,
            routing=("subscription", subscription),
            timeout=timeout,
        )

    async def modify_ack_deadline(
        self,
        subscription: str,
        ack_ids: Sequence[str],
        seconds: int,
        *,
        timeout: float | None = 60.0,
    ) -> None:
        await self.call(
            "Subscriber",
            "ModifyAckDeadline",
            pubsub_pb2.ModifyAckDeadlineRequest(
                subscription=subscription, ack_ids=ack_ids, ack_deadline_seconds=seconds
            ),
            empty_pb2.Empty,
            routing=("subscription", subscription),
            timeout=timeout,
        )

    async def pull(
        self, subscription: str, max_messages: int, *, timeout: float | None = 60.0
    ) -> pubsub_pb2.PullResponse:
        return await self.call(
            "Subscriber",
            "Pull",
            pubsub_pb2.PullRequest(subscription=subscription, max_messages=max_messages),
            pubsub_pb2.PullResponse,
            routing=("subscription", subscription),
            timeout=timeout,
        )

    def open_stream(self, subscription: str) -> GrpcPullStream:
        """Open a StreamingPull call (``subscriber.transport.SubscriberTransport``)."""
        key = "/google.pubsub.v1.Subscriber/StreamingPull"
        factory = self._calls.get(key)
        if factory is None:
            factory = self._calls[key] = self.channel.stream_stream(
                key,
                request_serializer=_serialize,
                response_deserializer=pubsub_pb2.StreamingPullResponse.FromString,
            )
        return GrpcPullStream(factory(None, metadata=_routing("subscription", subscription)))

    # ------------------------------------------------------------- publisher

    async def publish(
        self,
        topic: str,
        messages: Sequence[pubsub_pb2.PubsubMessage],
        *,
        timeout: float | None = 60.0,
    ) -> list[str]:
        response = await self.call(
            "Publisher",
            "Publish",
            pubsub_pb2.PublishRequest(topic=topic, messages=messages),
            pubsub_pb2.PublishResponse,
            routing=("topic", topic),
            timeout=timeout,
        )
        return list(response.message_ids)


class GrpcPullStream:
    """A grpc.aio StreamingPull call as a ``subscriber.transport.PullStream``.

    grpc.aio reports a write to a finished call as ``UsageError`` / ``InvalidStateError``
    (or, on the first write of a refused call, the call's ``AioRpcError``) and the end of
    the responses as the end of its iterator; here they become ``StreamClosedError``, the
    mapped ``RpcError`` and ``None``.
    """

    __slots__ = ("_call", "_responses")

    def __init__(self, call: Any) -> None:
        self._call = call
        # Responses are read through the call's async iterator, as before the transport
        # seam, not ``call.read()``: ``read()`` first checks ``done()`` and, if the call
        # has its status, raises it, where the iterator reads on until the core reports
        # the end (grpc.aio ``_StreamResponseMixin``). With ``read()``, a session whose
        # streams the server broke four times under load lost deliveries until their ack
        # deadline in 2 runs of 25 (test_session_stream.py, "drops under load"; 23 of
        # 2,000 messages in one); with the iterator, 0 of 25, as before.
        self._responses = call.__aiter__()

    async def send(self, request: pubsub_pb2.StreamingPullRequest) -> None:
        try:
            await self._call.write(request)
        except grpc.aio.AioRpcError as error:
            raise rpc_error_from_grpc(error) from error
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as error:
            raise StreamClosedError(str(error)) from error

    async def receive(self) -> pubsub_pb2.StreamingPullResponse | None:
        try:
            response = await anext(self._responses)
        except StopAsyncIteration:
            return None
        except grpc.aio.AioRpcError as error:
            raise rpc_error_from_grpc(error) from error
        assert isinstance(response, pubsub_pb2.StreamingPullResponse)
        return response

    async def done_writing(self) -> None:
        try:
            await self._call.done_writing()
        except grpc.aio.AioRpcError as error:
            raise rpc_error_from_grpc(error) from error
        except (grpc.aio.UsageError, asyncio.InvalidStateError) as error:
            raise StreamClosedError(str(error)) from error

    def cancel(self) -> None:
        self._call.cancel()


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()
