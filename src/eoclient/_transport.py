"""The gRPC transport: typed calls, and the one place errors are mapped.

Every google.pubsub.v1 call the SDK makes goes through ``PubSubTransport``; every
``grpc.aio.AioRpcError`` becomes an ``eoclient.errors.RpcError`` in
``rpc_error_from_grpc`` (docs/architecture.md#one-exception-root), with the ErrorInfo of a
``grpc-status-details-bin`` trailer decoded (docs/protocol.md#exactly-once-error-details).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError, Message
from google.rpc import error_details_pb2, status_pb2

from eoclient._endpoint import (
    CHANNEL_OPTIONS,
    EMULATOR_HOST_ENV,
    LOCAL_CHANNEL_OPTIONS,
    MAX_METADATA_BYTES,
    Endpoint,
    create_channel,
)
from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError, StreamClosedError, rpc_error_class

# Where a client connects lives in _endpoint; these names stay importable from here.
__all__ = [
    "CHANNEL_OPTIONS",
    "EMULATOR_HOST_ENV",
    "LOCAL_CHANNEL_OPTIONS",
    "MAX_METADATA_BYTES",
    "Endpoint",
    "GrpcPullStream",
    "PubSubTransport",
    "create_channel",
    "rpc_error_from_grpc",
]

# Said with every Acknowledge / ModifyAckDeadline: eoclient's server then lists every
# failed id up to this size, not only what fits in the 8 KiB other clients read
# (docs/protocol.md#ack-failures-that-do-not-fit-in-a-trailer); other servers ignore it.
_ERROR_TRAILER_BYTES = (("x-eoclient-error-trailer-bytes", str(MAX_METADATA_BYTES)),)

ResponseT = TypeVar("ResponseT", bound=Message)

# What BoringSSL says when the peer of a TLS handshake answers in plain text (gRPC core's
# "Tls handshake failed ... WRONG_VERSION_NUMBER"): a TLS endpoint that is an emulator or
# a plain-text eoclient serve. gRPC reports it as UNAVAILABLE "failed to connect"; the hint
# says what to change, since a string endpoint is TLS unless it names this machine.
PLAIN_TEXT_PEER = "WRONG_VERSION_NUMBER"
PLAIN_TEXT_PEER_HINT = (
    " (the TLS handshake met a plain-text server: for an emulator or eoclient serve, "
    "connect with Endpoint.insecure(target) or set PUBSUB_EMULATOR_HOST)"
)


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
        # an ErrorInfo (docs/protocol.md#rich-status-trailer).
        if status.details and status.details[0].Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            status.details[0].Unpack(info)
            reason = info.reason
            metadata = dict(info.metadata)
        break
    if code == "UNAVAILABLE" and PLAIN_TEXT_PEER in message:
        message += PLAIN_TEXT_PEER_HINT
    # The class depends on the message too: a size-limit RESOURCE_EXHAUSTED raised by the
    # gRPC stack is permanent, a quota one is not (errors.py, the classification table).
    return rpc_error_class(code, message)(message, reason=reason, error_info=metadata)


def _routing(resource_field: str, name: str) -> tuple[tuple[str, str], ...]:
    # Routing header the service uses to find the resource
    # (docs/protocol.md#request-routing-header).
    return (("x-goog-request-params", f"{resource_field}={name}"),)


class PubSubTransport:
    """Typed google.pubsub.v1 calls over one channel; errors raised as ``RpcError``.

    ``owns_channel=False`` for a channel someone else made (a client's ``channel=``):
    :meth:`close` then leaves it open for its owner.
    """

    def __init__(self, channel: grpc.aio.Channel, *, owns_channel: bool = True) -> None:
        self.channel = channel
        self.owns_channel = owns_channel
        self._calls: dict[str, Any] = {}

    async def close(self) -> None:
        if self.owns_channel:
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
        extra_metadata: tuple[tuple[str, str], ...] = (),
    ) -> ResponseT:
        metadata = (*_routing(*routing), *extra_metadata) if routing else extra_metadata or None
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
            extra_metadata=_ERROR_TRAILER_BYTES,
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
            extra_metadata=_ERROR_TRAILER_BYTES,
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

    async def pull_serialized(
        self, subscription: str, max_messages: int, *, timeout: float | None = 60.0
    ) -> bytes:
        """A Pull whose answer stays the ``PullResponse``'s wire bytes (for decoders of
        their own: ``SubscriberClient.pull_raw``)."""
        key = "/google.pubsub.v1.Subscriber/Pull#bytes"
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = self.channel.unary_unary(
                "/google.pubsub.v1.Subscriber/Pull",
                request_serializer=_serialize,
                response_deserializer=None,  # the bytes as they came
            )
        try:
            answer = await call(
                pubsub_pb2.PullRequest(subscription=subscription, max_messages=max_messages),
                timeout=timeout,
                metadata=_routing("subscription", subscription),
            )
        except grpc.aio.AioRpcError as error:
            raise rpc_error_from_grpc(error) from error
        assert isinstance(answer, bytes)
        return answer

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
