"""The receiver: opens a subscription's StreamingPull stream, reads it, and reopens it.

Each stream is opened with its first request (the only one the receiver writes) and then
attached to the sender (``sender.py``), which writes everything else. Each response goes
to the ack ledger through the sender (its confirmations) and to the dispatch core (its
subscription properties and deliveries). A stream that ends with a retryable status (or
OK) is reopened after the SDK's one backoff (``_retrying.retry_delay``: full jitter, doubling
from ``reconnect_initial_backoff`` to ``reconnect_max_backoff``, no deadline; it starts over
once a stream delivered something); any other status ends the session
through ``fail``. The task runs in the session's TaskGroup and never raises into it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
from collections.abc import Callable

from eoclient._clock import AsyncClock
from eoclient._proto import pubsub_pb2
from eoclient._retrying import RetrySettings, retry_delay
from eoclient.errors import RpcError, StreamClosedError
from eoclient.subscriber.dispatch import Dispatcher
from eoclient.subscriber.sender import AckSender
from eoclient.subscriber.settings import FlowControl, StreamSettings
from eoclient.subscriber.transport import SubscriberTransport

__all__ = ["StreamReceiver"]

logger = logging.getLogger("eoclient.subscriber")

# Reopen delays double each attempt (the multiplier of Go's gax.Backoff;
# docs/protocol.md#stream-reconnection).
RECONNECT_MULTIPLIER = 2.0


class StreamReceiver:
    """The receiving side of one session's stream (see the module docstring)."""

    def __init__(
        self,
        transport: SubscriberTransport,
        subscription: str,
        *,
        sender: AckSender,
        dispatch: Dispatcher,
        flow_control: FlowControl,
        stream: StreamSettings,
        client_id: str,
        clock: AsyncClock,
        rng: random.Random,
        fail: Callable[[BaseException], None],
    ) -> None:
        self.transport = transport
        self.subscription = subscription
        self.sender = sender
        self.dispatch = dispatch
        self.flow_settings = flow_control
        self.stream_settings = stream
        self.client_id = client_id
        self.clock = clock
        self.rng = rng
        self._fail = fail
        self.reconnects = 0

    def initial_request(self) -> pubsub_pb2.StreamingPullRequest:
        return pubsub_pb2.StreamingPullRequest(
            subscription=self.subscription,
            stream_ack_deadline_seconds=int(self.dispatch.stream_ack_deadline()),
            client_id=self.client_id,
            max_outstanding_messages=self.flow_settings.max_messages,
            max_outstanding_bytes=self.flow_settings.max_bytes,
        )

    def _receiving(self) -> bool:
        # A method, not a field read, because shutdown flips the flag from another task.
        return not self.dispatch.stopped

    async def run(self) -> None:
        """The receiver task."""
        settings = self.stream_settings
        backoff = RetrySettings(
            initial_backoff=settings.reconnect_initial_backoff,
            max_backoff=settings.reconnect_max_backoff,
            multiplier=RECONNECT_MULTIPLIER,
            deadline=math.inf,
        )
        attempt = 0  # reopens since a stream last delivered something
        sender, dispatch, clock = self.sender, self.dispatch, self.clock
        try:
            while self._receiving():
                call = self.transport.open_stream(self.subscription)
                error: RpcError | None = None
                try:
                    with contextlib.suppress(StreamClosedError):  # receive() says how
                        request = self.initial_request()
                        await call.send(request)
                        sender.attach(call)
                        logger.debug(
                            "stream of %s open (stream ack deadline %d s, at most %d "
                            "messages / %d bytes outstanding)",
                            self.subscription,
                            request.stream_ack_deadline_seconds,
                            request.max_outstanding_messages,
                            request.max_outstanding_bytes,
                        )
                    while (response := await call.receive()) is not None:
                        attempt = 0
                        if response.HasField("acknowledge_confirmation") or response.HasField(
                            "modify_ack_deadline_confirmation"
                        ):
                            sender.confirmed(response)
                        dispatch.on_response(response, clock.now())
                    if not self._receiving():
                        logger.debug("stream of %s closed", self.subscription)
                        return
                    # The server ended the stream with OK: reconnect at once.
                except RpcError as failure:
                    error = failure
                finally:
                    sender.detach(call)
                if not self._receiving():
                    logger.debug("stream of %s closed (%s)", self.subscription, error or "OK")
                    return
                if error is not None:
                    # Reconnect on a retryable status (the official clients' recover set,
                    # docs/protocol.md#stream-reconnection: errors.py's table); any other ends the
                    # session.
                    if not error.retryable:
                        self._fail(error)
                        return
                    logger.info("stream of %s ended (%s); reconnecting", self.subscription, error)
                else:
                    logger.debug("stream of %s ended by the server (OK)", self.subscription)
                self.reconnects += 1
                attempt += 1
                delay = retry_delay(backoff, attempt, 0.0, self.rng)
                assert (
                    delay is not None
                )  # no deadline: a stream is reopened for as long as it takes
                logger.debug(
                    "stream of %s: reconnecting in %.3f s (reconnect %d)",
                    self.subscription,
                    delay,
                    self.reconnects,
                )
                await clock.sleep(delay)
        except asyncio.CancelledError:
            raise
        except Exception as unexpected:
            self._fail(unexpected)
