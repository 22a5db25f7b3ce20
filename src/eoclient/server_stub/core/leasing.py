"""Messages out: unary Pull and StreamingPull streams lease messages to subscribers.

A lease lasts the subscription's ack deadline (Pull) or the stream's (StreamingPull) and
ends with an ack, a nack, an expiry or a modack (``acks``). A stream's flow control
(``StreamFlow``: outstanding messages and bytes) bounds what it is sent; the server's
lease limit (``max_leases``) bounds what one subscription holds in all. Every delivery
is recorded in the message history, and a Pull or an open stream keeps the subscription
active (its expiration policy).
"""

from __future__ import annotations

import itertools

from eoclient._clock import Clock
from eoclient.errors import FailedPrecondition, NotFound, ResourceExhausted
from eoclient.server_stub.core import validation
from eoclient.server_stub.core.delivery import StreamFlow, SubscriptionDelivery
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import Delivery
from eoclient.server_stub.core.resources import Resources, SubscriptionState

# Outstanding leases a subscription may hold at once (``Broker(max_leases=...)``, ``serve
# --max-leases``; 0: no limit). Each costs the server a few hundred bytes until it is
# acked, nacked or expires: a million is about 0.5 GB, and far beyond what any client's
# flow control asks for (the official clients' default is 1,000 messages a stream).
DEFAULT_MAX_LEASES = 1_000_000


class Leasing:
    """Pull and the open streams over the subscriptions of ``resources``."""

    def __init__(
        self,
        clock: Clock,
        resources: Resources,
        history: History,
        max_leases: int = DEFAULT_MAX_LEASES,
    ) -> None:
        self._clock = clock
        self._resources = resources
        self._history = history
        self.max_leases = max_leases
        self._stream_ids = itertools.count(1)
        # stream id -> (subscription name, its delivery state when the stream opened): a
        # subscription deleted and created again under the name is not the stream's.
        self._streams: dict[int, tuple[str, SubscriptionDelivery]] = {}

    def open_streams(self) -> int:
        return len(self._streams)

    def _pullable(self, name: str) -> SubscriptionState:
        subscription = self._resources.subscription(name)
        if subscription.config.detached:
            raise FailedPrecondition(
                f"The subscription {name} is detached from its topic: it cannot be pulled."
            )
        return subscription

    def pull(
        self,
        name: str,
        max_messages: int,
        *,
        max_bytes: int = validation.MAX_PULL_RESPONSE_BYTES,
    ) -> list[Delivery]:
        """Unary Pull: at most ``max_messages`` (and 1000) messages and about ``max_bytes``
        of message data (the first message goes whatever its size)."""
        validation.pull_max_messages(max_messages)
        subscription = self._pullable(name)
        now = self._clock.now()
        self._resources.touch(subscription, now)
        room = self._lease_room(subscription, now)
        if room == 0:
            raise ResourceExhausted(
                f"The subscription {name} holds {subscription.delivery.reads.leased()} outstanding "
                f"leases, the server's limit (--max-leases {self.max_leases}): acknowledge or "
                "nack messages before pulling more."
            )
        deliveries = subscription.delivery.deliver(
            now,
            min(max_messages, validation.MAX_PULL_MESSAGES, room),
            subscription.config.ack_deadline_seconds,
            max_bytes=max_bytes,
        )
        self._history.delivered(name, deliveries, now, via="pull")
        return deliveries

    def open_stream(
        self,
        name: str,
        *,
        stream_ack_deadline: int,
        max_outstanding_messages: int = 0,
        max_outstanding_bytes: int = 0,
    ) -> int:
        """Validate a StreamingPull's first request and register the stream's flow control."""
        validation.stream_ack_deadline(stream_ack_deadline)
        subscription = self._pullable(name)
        stream_id = next(self._stream_ids)
        subscription.delivery.streams.open(
            StreamFlow(
                stream_id=stream_id,
                ack_deadline=stream_ack_deadline,
                max_messages=max_outstanding_messages,
                max_bytes=max_outstanding_bytes,
            )
        )
        self._resources.touch(subscription, self._clock.now())
        self._streams[stream_id] = (name, subscription.delivery)
        return stream_id

    def set_stream_ack_deadline(self, stream_id: int, seconds: int) -> None:
        validation.stream_ack_deadline(seconds)
        flow = self._stream_owner(stream_id).delivery.streams.get(stream_id)
        if flow is not None:
            flow.ack_deadline = seconds

    def _stream_owner(self, stream_id: int) -> SubscriptionState:
        name, delivery = self._streams.get(stream_id, ("", None))
        subscription = self._resources.subscriptions.get(name)
        if subscription is None or subscription.delivery is not delivery:
            raise NotFound("Subscription does not exist (it was deleted while streaming).")
        return subscription

    def stream_pull(self, stream_id: int, max_messages: int = 1000) -> list[Delivery]:
        """Deliver what the stream's flow control allows, with the stream's ack deadline."""
        subscription = self._stream_owner(stream_id)
        if subscription.config.detached:
            raise FailedPrecondition(
                f"The subscription {subscription.config.name} was detached from its topic."
            )
        flow = subscription.delivery.streams.get(stream_id)
        if flow is None:
            return []
        now = self._clock.now()
        self._resources.touch(subscription, now)
        # At the lease limit the stream waits: the acks and nacks that free room wake it.
        max_messages = min(max_messages, self._lease_room(subscription, now))
        if max_messages == 0:
            return []
        deliveries = subscription.delivery.deliver(now, max_messages, flow.ack_deadline, stream_id)
        self._history.delivered(subscription.config.name, deliveries, now, via="stream")
        return deliveries

    def _lease_room(self, subscription: SubscriptionState, now: float) -> int:
        """How many more leases the subscription may take (the lease limit).

        ``now`` is the caller's: the delivery that follows must not see time go back
        (a message scheduled at a later ``now`` would not be ready at the earlier one).
        """
        if self.max_leases <= 0:
            return validation.MAX_PULL_MESSAGES
        subscription.delivery.advance(now)  # expired leases free room first
        return max(self.max_leases - subscription.delivery.reads.leased(), 0)

    def close_stream(self, stream_id: int) -> None:
        name, delivery = self._streams.pop(stream_id, ("", None))
        subscription = self._resources.subscriptions.get(name)
        if subscription is not None and subscription.delivery is delivery:
            subscription.delivery.streams.close(stream_id)
            self._resources.touch(subscription, self._clock.now())  # connected until now

    def stream_subscription(self, stream_id: int) -> str | None:
        name, _ = self._streams.get(stream_id, (None, None))
        return name
