"""What the subscriber needs from a transport: the seam between its logic and gRPC.

Two small protocols, implemented for gRPC by ``eoclient._transport`` (the one module
that imports grpc and maps its errors) and, in the tests, by an in-memory fake
(tests/subscriber/fake_transport.py), the way httpx's ``MockTransport`` stands in for
a network: the code under test cannot tell them apart.

Every method raises only :mod:`eoclient.errors` types: :class:`~eoclient.errors.RpcError`
subclasses for a status, :class:`~eoclient.errors.StreamClosedError` for a write to a
stream that has ended (its reader learns why). The messages are the generated
``google.pubsub.v1`` protobufs: internal types, never part of the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from eoclient._proto import pubsub_pb2

__all__ = ["PullStream", "SubscriberTransport"]


class PullStream(Protocol):
    """One StreamingPull call, used reader / writer style by two tasks."""

    async def send(self, request: pubsub_pb2.StreamingPullRequest) -> None:
        """Write one request (the first one opens the stream).

        Raises ``StreamClosedError`` if the call has ended or our side is half-closed,
        or the ``RpcError`` the call ended with if it is known at once.
        """
        ...

    async def receive(self) -> pubsub_pb2.StreamingPullResponse | None:
        """The next response; ``None`` once the server has ended the call with OK.

        Raises the ``RpcError`` the call ended with.
        """
        ...

    async def done_writing(self) -> None:
        """Half-close: no more requests; the server ends the call when it is done.

        Raises ``StreamClosedError`` if the call has already ended.
        """
        ...

    def cancel(self) -> None:
        """End the call now (idempotent); a pending ``receive`` ends too."""
        ...


class SubscriberTransport(Protocol):
    """The google.pubsub.v1 Subscriber calls a subscription session makes."""

    def open_stream(self, subscription: str) -> PullStream:
        """A new StreamingPull call on ``subscription``; the caller sends the first request."""
        ...

    async def acknowledge(self, subscription: str, ack_ids: Sequence[str]) -> None: ...

    async def modify_ack_deadline(
        self, subscription: str, ack_ids: Sequence[str], seconds: int
    ) -> None: ...

    async def pull(self, subscription: str, max_messages: int) -> pubsub_pb2.PullResponse: ...
