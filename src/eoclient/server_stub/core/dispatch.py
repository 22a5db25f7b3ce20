"""Messages in and out: publish, pull, streams, acks and modacks, dead letters.

Exactly-once rules (wire-contract §2.1, §2.4), all enforced in ``acknowledge`` and
``modify_ack_deadline`` through ``SubscriptionDelivery.resolve``: a new ack id per
delivery; only the latest delivery's id is valid; an id is invalid once its deadline
passed (even before any redelivery), once the message was acked, nacked or redelivered;
no redelivery while a lease is live; invalid ids fail one by one while valid ones in the
same request are applied; with ordering, acking a message while an earlier delivered
message of its key is unacked fails with TRANSIENT_FAILURE_UNORDERED_ACK_ID.

Filters are applied at publish: a message that does not match is settled at once on that
subscription, never delivered and never dead-lettered. Dead letters are forwarded after
max_delivery_attempts (``delivery`` decides when) with a new message id and the real
service's CloudPubSubDeadLetter* attributes.
"""

from __future__ import annotations

import datetime
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from eoclient._clock import Clock
from eoclient.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from eoclient.server_stub.core import names, policies, validation
from eoclient.server_stub.core.ack_ids import (
    MAX_ACK_ID_NUMBER_DIGITS,
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TRANSIENT_FAILURE_UNORDERED_ACK_ID,
    parse_ack_id,
)
from eoclient.server_stub.core.delivery import Forwarder, SubscriptionDelivery
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import AckReply, Delivery, NewMessage, StoredMessage
from eoclient.server_stub.core.policies import BacklogQuotaHeld, QuotaAction, SkipOutcome
from eoclient.server_stub.core.resources import Resources, SubscriptionState, TopicState
from eoclient.server_stub.core.store import SeqMessage, Store
from eoclient.server_stub.core.stream_flow import StreamFlow

# Attributes the real service adds to a dead-lettered message (wire-contract §1.5,
# confirmed by the emulator's output).
DEAD_LETTER_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
DEAD_LETTER_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
DEAD_LETTER_SUBSCRIPTION_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DEAD_LETTER_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"

Operation = Literal["ack", "modack"]

# Outstanding leases a subscription may hold at once (``Broker(max_leases=...)``, ``serve
# --max-leases``; 0: no limit). Each costs the server a few hundred bytes until it is
# acked, nacked or expires: a million is about 0.5 GB, and far beyond what any client's
# flow control asks for (the official clients' default is 1,000 messages a stream).
DEFAULT_MAX_LEASES = 1_000_000


@dataclass
class AckFault:
    """An injected per-message ack/modack failure (test instrument)."""

    reason: str
    remaining: int  # how many more requests fail; < 0 = forever
    operations: frozenset[str]


class Dispatch:
    """Publish fan-out, deliveries and settlements over the subscriptions of ``resources``."""

    def __init__(
        self,
        clock: Clock,
        store: Store,
        resources: Resources,
        history: History,
        changed: Callable[[str], None],
        max_leases: int = DEFAULT_MAX_LEASES,
    ) -> None:
        self._clock = clock
        self.max_leases = max_leases
        self._store = store
        self._resources = resources
        self._history = history
        self._changed = changed
        self.last_seq = 0  # message ids are the seqs: one counter for both
        self._stream_ids = itertools.count(1)
        # stream id -> (subscription name, its delivery state when the stream opened): a
        # subscription deleted and created again under the name is not the stream's.
        self._streams: dict[int, tuple[str, SubscriptionDelivery]] = {}
        self._ack_faults: dict[tuple[str, str], AckFault] = {}

    def open_streams(self) -> int:
        return len(self._streams)

    # ================================================================ publish

    def publish(
        self, topic_name: str, messages: Sequence[NewMessage], request_bytes: int = 0
    ) -> list[str]:
        """Validate (delay attributes included: nothing is stored if one is bad), apply
        the topic's backlog quota, then store and fan out."""
        topic = self._resources.topic(topic_name)
        validation.publish(messages, request_bytes)
        now = self._clock.now()
        for new in messages:
            if new.attributes:
                policies.deliver_at(new.attributes, now)
        self._apply_backlog_quota(topic, now)
        ids = self._publish_to(topic, messages, now)
        counters = topic.counters
        counters.publish_requests += 1
        counters.published_messages += len(messages)
        counters.published_bytes += request_bytes or sum(message_size(m) for m in messages)
        return ids

    def _apply_backlog_quota(self, topic: TopicState, now: float) -> None:
        """A subscription over the topic's quota: evict, refuse or hold (policies.py)."""
        quota = topic.config.policies.backlog_quota
        if quota is None:
            return
        over = [
            subscription
            for subscription in (
                self._resources.subscriptions[n] for n in sorted(topic.subscriptions)
            )
            if not subscription.config.internal
            and subscription.delivery.over_quota(now, quota.limit_bytes, quota.limit_age)
        ]
        if not over:
            return
        if quota.action is QuotaAction.EVICTION:
            for subscription in over:
                if subscription.delivery.evict(now, quota.limit_bytes, quota.limit_age):
                    self._changed(subscription.config.name)
            return
        laggard = over[0].delivery
        limits = []
        if quota.limit_bytes is not None:
            limits.append(f"{laggard.backlog_bytes()} of {quota.limit_bytes} bytes")
        if quota.limit_age is not None:
            oldest = laggard.oldest_unacked()
            age = now - oldest if oldest is not None else 0.0
            limits.append(f"oldest message {age:.0f} s old, limit {quota.limit_age:g} s")
        text = (
            f"Backlog quota exceeded on topic {topic.config.name} "
            f"({quota.action.value}): subscription {over[0].config.name} holds "
            f"{'; '.join(limits)}. Consume or acknowledge messages, or change the quota."
        )
        if quota.action is QuotaAction.EXCEPTION:
            topic.counters.refused_publishes += 1
            raise ResourceExhausted(text)
        raise BacklogQuotaHeld(text, quota.hold_timeout)

    def note_held_publish(self, topic_name: str, *, admitted: bool) -> None:
        """The door held a Publish on a HOLD quota; ``admitted``: space freed in time."""
        topic = self._resources.topics.get(topic_name)
        if topic is not None:
            topic.counters.held_publishes += 1
            if not admitted:
                topic.counters.held_then_refused += 1

    def _publish_to(
        self, topic: TopicState, messages: Sequence[NewMessage], now: float
    ) -> list[str]:
        """Store ``messages`` on every subscription of ``topic`` whose filter they match
        (and its retention cursor, if it has one)."""
        subscriptions = [self._resources.subscriptions[n] for n in sorted(topic.subscriptions)]
        stored: list[SeqMessage] = []
        receivers: dict[str, list[int]] = {s.config.name: [] for s in subscriptions}
        for new in messages:
            seq = self.last_seq = self.last_seq + 1
            attributes = dict(new.attributes)
            message = StoredMessage(
                message_id=str(seq),
                data=new.data,
                attributes=attributes,
                ordering_key=new.ordering_key,
                publish_time=now,
                size=message_size(new),
                deliver_at=policies.deliver_at(attributes, now) if attributes else 0.0,
            )
            stored.append((seq, message))
            for subscription in subscriptions:
                if subscription.filter is not None and not subscription.filter.matches(
                    message.attributes
                ):
                    # "Pub/Sub automatically acknowledges the messages that don't match
                    # the filter" (filter page): never delivered, never dead-lettered.
                    subscription.delivery.filtered()
                    continue
                receivers[subscription.config.name].append(seq)
        # The store first: a subscription's window may leave a message cold (the store's).
        self._store.publish(topic.config.name, stored, receivers)
        by_seq = dict(stored)
        for subscription in subscriptions:
            seqs = receivers[subscription.config.name]
            for seq in seqs:
                subscription.delivery.add(seq, by_seq[seq], now, now)
            if subscription.config.internal:  # the retention cursor's size limit
                retention = topic.config.policies.retention
                if retention is not None and retention.enabled:
                    subscription.delivery.trim(
                        now,
                        retention.size_limit,
                        keep_since=Resources.cursor_keep_since(topic.config, now),
                    )
            elif seqs:
                self._changed(subscription.config.name)
        return [message.message_id for _, message in stored]

    # ========================================================== skip by id

    def skip_messages(self, name: str, message_ids: Sequence[str]) -> dict[str, SkipOutcome]:
        """Acknowledge chosen messages on a subscription as a subscriber would (PIP-423).

        Message ids are the seqs this server numbered; an id it never issued is
        NOT_FOUND, one not pending on the subscription ALREADY_ACKNOWLEDGED.
        """
        subscription = self._resources.subscription(name)
        now = self._clock.now()
        subscription.delivery.advance(now)
        outcomes: dict[str, SkipOutcome] = {}
        for message_id in dict.fromkeys(message_ids):  # an id twice: skipped once
            seq = _seq_of(message_id)
            if seq is None or not 1 <= seq <= self.last_seq:
                outcomes[message_id] = SkipOutcome.NOT_FOUND
            elif subscription.delivery.skip(seq):
                outcomes[message_id] = SkipOutcome.SKIPPED
            else:
                outcomes[message_id] = SkipOutcome.ALREADY_ACKNOWLEDGED
        if SkipOutcome.SKIPPED in outcomes.values():
            self._changed(name)  # a skipped head unblocks its ordering key
        return outcomes

    # ========================================================== dead letters

    def forwarder(self, subscription_name: str) -> Forwarder:
        def forward(message: StoredMessage, delivery_count: int) -> bool:
            return self._forward_dead_letter(subscription_name, message, delivery_count)

        return forward

    def _forward_dead_letter(self, name: str, message: StoredMessage, delivery_count: int) -> bool:
        """Publish ``message`` to the subscription's dead-letter topic, as the service does.

        A new message (new id, new publish time) with the same data, attributes and
        ordering key plus the four CloudPubSubDeadLetter* attributes (wire-contract §1.5).
        Returns False, and the source keeps redelivering the message, when there is no
        dead-letter topic to publish to: it was deleted after the policy was set (the
        real service cannot forward either then, and dead lettering is "best effort" per
        the DeadLetterPolicy proto comment; the message is not lost).
        """
        subscription = self._resources.subscriptions.get(name)
        policy = subscription.config.dead_letter_policy if subscription else None
        topic = self._resources.topics.get(policy.dead_letter_topic) if policy else None
        if topic is None:
            return False
        now = self._clock.now()
        attributes = dict(message.attributes)
        attributes[DEAD_LETTER_DELIVERY_COUNT] = str(delivery_count)
        attributes[DEAD_LETTER_SUBSCRIPTION] = names.short_id(name)
        attributes[DEAD_LETTER_SUBSCRIPTION_PROJECT] = names.project_of(name)
        attributes[DEAD_LETTER_PUBLISH_TIME] = rfc3339_millis(message.publish_time)
        forwarded = NewMessage(message.data, attributes, message.ordering_key)
        [new_id] = self._publish_to(topic, [forwarded], now)
        self._history.forwarded(
            name, message.message_id, now, topic.config.name, new_id, delivery_count
        )
        return True

    # ================================================================== pull

    def _pullable(self, name: str) -> SubscriptionState:
        subscription = self._resources.subscription(name)
        if subscription.config.detached:
            raise FailedPrecondition(
                f"The subscription {name} is detached from its topic: it cannot be pulled."
            )
        return subscription

    def pull(self, name: str, max_messages: int, *, max_bytes: int) -> list[Delivery]:
        """Unary Pull: at most ``max_messages`` (and 1000) messages and about ``max_bytes``
        of message data (the first message goes whatever its size)."""
        validation.pull_max_messages(max_messages)
        subscription = self._pullable(name)
        now = self._clock.now()
        self._resources.touch(subscription, now)
        room = self._lease_room(subscription, now)
        if room == 0:
            raise ResourceExhausted(
                f"The subscription {name} holds {subscription.delivery.leased()} outstanding "
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
        subscription.delivery.open_stream(
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
        flow = self._stream_owner(stream_id).delivery.stream(stream_id)
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
        flow = subscription.delivery.stream(stream_id)
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
        return max(self.max_leases - subscription.delivery.leased(), 0)

    def close_stream(self, stream_id: int) -> None:
        name, delivery = self._streams.pop(stream_id, ("", None))
        subscription = self._resources.subscriptions.get(name)
        if subscription is not None and subscription.delivery is delivery:
            subscription.delivery.close_stream(stream_id)
            self._resources.touch(subscription, self._clock.now())  # connected until now

    def stream_subscription(self, stream_id: int) -> str | None:
        name, _ = self._streams.get(stream_id, (None, None))
        return name

    # ========================================================= ack / modack

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> AckReply:
        subscription = self._resources.subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        return self._apply(subscription, ack_ids, "ack", 0)

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> AckReply:
        subscription = self._resources.subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        validation.modack_seconds(seconds)
        return self._apply(subscription, ack_ids, "modack", seconds)

    def _apply(
        self,
        subscription: SubscriptionState,
        ack_ids: Sequence[str],
        operation: Operation,
        seconds: int,
    ) -> AckReply:
        now = self._clock.now()
        name = subscription.config.name
        delivery = subscription.delivery
        delivery.advance(now)
        self._resources.touch(subscription, now)
        exactly_once = subscription.config.enable_exactly_once_delivery
        parsed = [parse_ack_id(ack_id) for ack_id in ack_ids]
        if not exactly_once:
            for ack_id, parts in zip(ack_ids, parsed, strict=True):
                if not delivery.wellformed_parts(parts):
                    # The real service rejects ids it never issued, even without
                    # exactly-once (the emulator: "Invalid ack id (ack_id=bogus)").
                    raise InvalidArgument(
                        f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
                    )
        confirmed: list[str] = []
        failures: dict[str, str] = {}
        changed = False
        history = self._history
        for ack_id, parts in zip(ack_ids, parsed, strict=True):
            entry = delivery.resolve_parts(parts)
            fault = self._take_fault(name, entry.message_id if entry else "", operation)
            if fault:
                failures[ack_id] = fault
                history.answered(name, entry, ack_id, operation, seconds, now, fault)
                continue
            if entry is None:
                if exactly_once:
                    failures[ack_id] = PERMANENT_FAILURE_INVALID_ACK_ID
                    history.answered(
                        name,
                        None,
                        ack_id,
                        operation,
                        seconds,
                        now,
                        PERMANENT_FAILURE_INVALID_ACK_ID,
                    )
                    continue
                # Without exactly-once an ack of an older delivery still settles the
                # message (acks are best effort, an expired id may be honoured);
                # modacks of stale ids are ignored.
                stale = delivery.lookup_parts(parts) if operation == "ack" else None
                history.answered(name, stale, ack_id, operation, seconds, now, "")
                if stale is not None:
                    delivery.ack(stale)
                    changed = True
                confirmed.append(ack_id)
                continue
            if operation == "ack":
                if exactly_once and delivery.first_unacked_before(entry):
                    failures[ack_id] = TRANSIENT_FAILURE_UNORDERED_ACK_ID
                    history.answered(
                        name,
                        entry,
                        ack_id,
                        operation,
                        seconds,
                        now,
                        TRANSIENT_FAILURE_UNORDERED_ACK_ID,
                    )
                    continue
                history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.ack(entry)
            elif seconds == 0:
                history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.nack(entry, now)
            else:
                history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.extend(entry, now, seconds)
            changed = changed or operation == "ack" or seconds == 0
            confirmed.append(ack_id)
        for reason in failures.values():
            delivery.counters.ack_failed(operation, reason)
        if changed:
            self._changed(name)
        return AckReply(tuple(confirmed), failures, exactly_once)

    # ============================================================ fault injection

    def inject_ack_failure(
        self,
        subscription: str,
        message_id: str,
        reason: str,
        *,
        times: int = 1,
        operations: Iterable[str] = ("ack", "modack"),
    ) -> None:
        """Make the next ``times`` acks/modacks of a message fail with ``reason`` (-1: always).

        ``reason`` is an ErrorInfo metadata value such as ``TRANSIENT_FAILURE_OTHER`` or
        ``PERMANENT_FAILURE_OTHER``; a failed request is not applied.
        """
        self._ack_faults[(subscription, message_id)] = AckFault(
            reason, times, frozenset(operations)
        )

    def _take_fault(self, subscription: str, message_id: str, operation: str) -> str:
        if not message_id or not self._ack_faults:
            return ""
        fault = self._ack_faults.get((subscription, message_id))
        if fault is None or operation not in fault.operations or fault.remaining == 0:
            return ""
        if fault.remaining > 0:
            fault.remaining -= 1
        return fault.reason


def _seq_of(message_id: str) -> int | None:
    """The seq a message id of this server names (they are the same number)."""
    if not (0 < len(message_id) <= MAX_ACK_ID_NUMBER_DIGITS and message_id.isascii()):
        return None
    return int(message_id) if message_id.isdigit() else None


def rfc3339_millis(seconds: float) -> str:
    """``2026-11-22T03:06:25.555Z``: the form of CloudPubSubDeadLetterSourceTopicPublishTime."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def message_size(message: NewMessage) -> int:
    """Bytes counted for flow control: data + attribute keys and values + ordering key."""
    return (
        len(message.data)
        + sum(len(k.encode()) + len(v.encode()) for k, v in message.attributes.items())
        + len(message.ordering_key.encode())
    )
