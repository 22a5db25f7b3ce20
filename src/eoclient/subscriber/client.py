"""``SubscriberClient``: the asyncio entry point for receiving messages."""

from __future__ import annotations

import random
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

from eoclient._clock import Clock, MonotonicClock
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.errors import ClosedError
from eoclient.subscriber.acker import Acker, AckRequest
from eoclient.subscriber.message import Message, message_from_wire
from eoclient.subscriber.session import StreamingSession, new_client_id, run_handler
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownOptions,
    StreamSettings,
)


class SubscriberClient:
    """Connects to ``endpoint``, or ``PUBSUB_EMULATOR_HOST``, or the real service.

    ::

        async with SubscriberClient() as client:
            async with client.subscribe(subscription) as stream:
                async for message in stream:
                    status = await message.ack_with_response()
    """

    def __init__(self, endpoint: str | None = None, *, clock: Clock | None = None) -> None:
        self._endpoint = Endpoint.resolve(endpoint)
        self._transport: PubSubTransport | None = None
        self._closed = False
        self._clock = clock
        # Stable across reconnects so the server can keep affinity (client-anchors §1.8).
        self.client_id = new_client_id()
        # Sessions not yet garbage: aclose() closes the ones still open before the channel.
        self._sessions: weakref.WeakSet[StreamingSession] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"<SubscriberClient {self._endpoint.target}{' closed' if self._closed else ''}>"

    async def __aenter__(self) -> SubscriberClient:
        self._get_transport()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close every session still open (per its shutdown options), then the channel.

        Idempotent.
        """
        self._closed = True
        for session in list(self._sessions):
            await session.aclose()
        transport, self._transport = self._transport, None
        if transport is not None:
            await transport.close()

    def _get_transport(self) -> PubSubTransport:
        if self._closed:
            raise ClosedError("the SubscriberClient is closed")
        if self._transport is None:
            self._transport = PubSubTransport(create_channel(self._endpoint))
        return self._transport

    def subscribe(
        self,
        subscription: str,
        *,
        flow_control: FlowControl | None = None,
        lease: LeaseSettings | None = None,
        shutdown: ShutdownOptions | None = None,
        ack_retry: AckRetrySettings | None = None,
        stream: StreamSettings | None = None,
        rng: random.Random | None = None,
    ) -> StreamingSession:
        """A StreamingPull session; use it with ``async with`` and ``async for``."""
        session = StreamingSession(
            self._get_transport(),
            subscription,
            flow_control=flow_control or FlowControl(),
            lease=lease or LeaseSettings(),
            shutdown=shutdown or ShutdownOptions(),
            ack_retry=ack_retry or AckRetrySettings(),
            stream=stream or StreamSettings(),
            client_id=self.client_id,
            clock=self._clock,
            rng=rng,
        )
        self._sessions.add(session)
        return session

    async def run(
        self,
        subscription: str,
        handler: Callable[[Message], Awaitable[Any]],
        **settings: Any,
    ) -> None:
        """Run ``handler`` for every message until cancelled (or a permanent error).

        One coroutine per message, as many at once as flow control allows. A
        handler that raises has its message nacked.
        """
        async with self.subscribe(subscription, **settings) as session:
            await run_handler(session, handler)

    async def pull(
        self,
        subscription: str,
        max_messages: int = 100,
        *,
        ack_retry: AckRetrySettings | None = None,
    ) -> list[Message]:
        """One unary Pull. The messages are not leased: settle them before the deadline."""
        transport = self._get_transport()
        response = await transport.pull(subscription, max_messages)
        sink = _UnarySink(
            Acker(
                subscription,
                transport,
                ack_retry or AckRetrySettings(),
                exactly_once=True,
                stream_capable=False,
            )
        )
        now = (self._clock or MonotonicClock()).now()
        return [message_from_wire(received, sink, now) for received in response.received_messages]


class _UnarySink:
    """Settles pulled messages by unary calls, one call per settlement."""

    def __init__(self, acker: Acker) -> None:
        self.acker = acker

    def settle(self, message: Message, operation: str, seconds: int) -> Any:
        return self._send(message.ack_id, operation, seconds)

    def extend(self, message: Message, seconds: int) -> Any:
        return self._send(message.ack_id, "modack", seconds)

    def _send(self, ack_id: str, operation: str, seconds: int) -> Any:
        import asyncio

        loop = asyncio.get_running_loop()
        request = AckRequest(ack_id, operation, seconds)
        task = loop.create_task(self.acker.send_unary([request]))
        _PENDING.add(task)
        task.add_done_callback(_PENDING.discard)
        return request


# Unary settlements of pulled messages run as tasks referenced here until done
# (an unreferenced task may be garbage-collected mid-flight).
_PENDING: set[Any] = set()
