"""Raw google.pubsub.v1 calls over grpc.aio, for the tests that talk over the wire.

``Wire`` calls any RPC by name with eoclient's own generated descriptors
(``await wire.Pull(request)``), plus a few helpers (unique resource names, pull-until-n,
a StreamingPull driver ``WireStream``). The ``wire_factory`` and ``wire`` fixtures of
``tests/conftest.py`` open and close them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.protobuf import message_factory
from google.rpc import error_details_pb2, status_pb2

from eoclient._proto import pubsub_pb2

PROJECT = "p1"
_names = itertools.count(1)


def unique(kind: str, project: str = PROJECT) -> str:
    """A resource name no other test uses (the emulator lives for the whole session)."""
    prefix = "topics" if kind == "topic" else "subscriptions"
    return f"projects/{project}/{prefix}/{kind}-{uuid.uuid4().hex[:10]}-{next(_names)}"


def _method_table() -> dict[str, tuple[str, type[Any], bool]]:
    """RPC name → (full method path, response class, is streaming), from our descriptors."""
    table: dict[str, tuple[str, type[Any], bool]] = {}
    for service in pubsub_pb2.DESCRIPTOR.services_by_name.values():
        for method in service.methods:
            response = message_factory.GetMessageClass(method.output_type)
            streaming = method.client_streaming or method.server_streaming
            table[method.name] = (f"/{service.full_name}/{method.name}", response, streaming)
    return table


_METHODS = _method_table()


def _serialize(message: Any) -> bytes:
    return bytes(message.SerializeToString())


class Wire:
    """Raw google.pubsub.v1 calls over one grpc.aio channel.

    ``await wire.CreateTopic(pubsub_pb2.Topic(name=...))`` calls any unary RPC by name;
    ``wire.StreamingPull(requests)`` returns the raw stream call, ``wire.stream(...)`` a
    ``WireStream`` driver.
    """

    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.aio.insecure_channel(address)
        self._streams: list[WireStream] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name not in _METHODS:
            raise AttributeError(name)
        path, response, streaming = _METHODS[name]
        if streaming:
            return self.channel.stream_stream(
                path, request_serializer=_serialize, response_deserializer=response.FromString
            )
        return self.channel.unary_unary(
            path, request_serializer=_serialize, response_deserializer=response.FromString
        )

    async def close(self) -> None:
        for stream in self._streams:
            await stream.cancel()
        await self.channel.close()

    # -------------------------------------------------------------- helpers

    async def topic(self) -> str:
        name = unique("topic")
        await self.CreateTopic(pubsub_pb2.Topic(name=name))
        return name

    async def subscription(self, topic: str | None = None, **fields: Any) -> tuple[str, str]:
        """Create a (new, unless given) topic and a subscription with ``fields``."""
        topic = topic or await self.topic()
        name = unique("sub")
        await self.CreateSubscription(pubsub_pb2.Subscription(name=name, topic=topic, **fields))
        return topic, name

    async def publish(self, topic: str, *data: bytes, ordering_key: str = "") -> list[str]:
        messages = [pubsub_pb2.PubsubMessage(data=d, ordering_key=ordering_key) for d in data]
        response = await self.Publish(pubsub_pb2.PublishRequest(topic=topic, messages=messages))
        return list(response.message_ids)

    async def pull(
        self, subscription: str, count: int, *, timeout: float = 10.0
    ) -> list[pubsub_pb2.ReceivedMessage]:
        """Pull until ``count`` messages arrived (fails after ``timeout`` seconds)."""
        received: list[pubsub_pb2.ReceivedMessage] = []
        deadline = time.monotonic() + timeout
        while len(received) < count:
            assert time.monotonic() < deadline, f"pulled {len(received)} of {count} messages"
            response = await self.Pull(
                pubsub_pb2.PullRequest(
                    subscription=subscription,
                    max_messages=count - len(received),
                    return_immediately=True,
                )
            )
            received.extend(response.received_messages)
            if not response.received_messages:
                await asyncio.sleep(0.02)
        return received

    async def pull_nothing(self, subscription: str) -> None:
        """Assert that nothing is deliverable right now."""
        response = await self.Pull(
            pubsub_pb2.PullRequest(
                subscription=subscription, max_messages=10, return_immediately=True
            )
        )
        assert list(response.received_messages) == []

    def stream(self, subscription: str, **first: Any) -> WireStream:
        """Open a StreamingPull; ``first`` are the first request's fields (deadline 60 s)."""
        first.setdefault("stream_ack_deadline_seconds", 60)
        stream = WireStream(
            self, pubsub_pb2.StreamingPullRequest(subscription=subscription, **first)
        )
        self._streams.append(stream)
        return stream

    @staticmethod
    def rich_status(error: grpc.aio.AioRpcError) -> status_pb2.Status | None:
        """The google.rpc.Status of ``grpc-status-details-bin``, if the server sent one."""
        for key, value in error.trailing_metadata() or ():
            if key == "grpc-status-details-bin":
                return status_pb2.Status.FromString(value)
        return None

    @staticmethod
    def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo | None:
        """details[0] of the rich status as an ErrorInfo (the only detail clients look at)."""
        status = Wire.rich_status(error)
        if status is None or not status.details:
            return None
        info = error_details_pb2.ErrorInfo()
        if not status.details[0].Unpack(info):
            return None
        return info


class WireStream:
    """Drives one StreamingPull: requests go through a queue, a task collects responses."""

    def __init__(self, wire: Wire, first: pubsub_pb2.StreamingPullRequest) -> None:
        self._requests: asyncio.Queue[pubsub_pb2.StreamingPullRequest | None] = asyncio.Queue()
        self._requests.put_nowait(first)
        self.responses: asyncio.Queue[pubsub_pb2.StreamingPullResponse] = asyncio.Queue()
        self.call = wire.StreamingPull(self._request_iterator())
        self.error: grpc.aio.AioRpcError | None = None
        self._reader = asyncio.create_task(self._read())

    async def _request_iterator(self) -> AsyncIterator[pubsub_pb2.StreamingPullRequest]:
        while (request := await self._requests.get()) is not None:
            yield request

    async def _read(self) -> None:
        try:
            async for response in self.call:
                self.responses.put_nowait(response)
        except grpc.aio.AioRpcError as error:
            self.error = error

    def send(self, **fields: Any) -> None:
        self._requests.put_nowait(pubsub_pb2.StreamingPullRequest(**fields))

    async def sync(self, timeout: float = 5.0) -> None:
        """Send a keep-alive and wait for its answer (needs ``protocol_version=1``): the
        server handles a stream's requests in order, so everything sent before is applied."""
        self.send()
        response = await self.next(timeout)
        assert not response.received_messages, "sync() met a delivery; collect those first"

    def half_close(self) -> None:
        self._requests.put_nowait(None)

    async def next(self, timeout: float = 5.0) -> pubsub_pb2.StreamingPullResponse:
        """The next response (fails after ``timeout`` s, or if the call ended first)."""
        get = asyncio.ensure_future(self.responses.get())
        done, _ = await asyncio.wait(
            {get, self._reader}, timeout=timeout, return_when="FIRST_COMPLETED"
        )
        if get in done:
            return get.result()
        get.cancel()
        if self._reader in done:
            raise AssertionError(f"the stream ended: {self.error!r}")
        raise AssertionError(f"no StreamingPullResponse within {timeout} s")

    async def quiet(self, seconds: float = 0.3) -> None:
        """Assert that no response arrives for ``seconds`` (a bounded negative check)."""
        try:
            response = await asyncio.wait_for(self.responses.get(), seconds)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected response: {response}")

    async def messages(self, count: int, timeout: float = 5.0) -> list[pubsub_pb2.ReceivedMessage]:
        """Collect exactly ``count`` delivered messages from the next responses."""
        received: list[pubsub_pb2.ReceivedMessage] = []
        while len(received) < count:
            received.extend((await self.next(timeout)).received_messages)
        assert len(received) == count, f"expected {count} messages, got {len(received)}"
        return received

    async def ended(self, timeout: float = 5.0) -> grpc.aio.AioRpcError | None:
        """Wait for the call to end; its error, or None if it ended with OK."""
        await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        return self.error

    async def cancel(self) -> None:
        self.call.cancel()
        self._requests.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
