"""The broker: topics, subscriptions, publish, pull, leases, acks — one synchronous state.

Every public method reads the injected clock once and runs to completion without
I/O; adapters call it from one thread (the event loop). Errors are raised as
``eoclient.errors.RpcError`` subclasses carrying the status the wire must return.

Exactly-once rules (wire-contract §2.1, §2.4), all enforced in ``acknowledge`` and
``modify_ack_deadline`` through ``SubscriptionDelivery.resolve``: a new ack id per
delivery; only the latest delivery's id is valid; an id is invalid once its
deadline passed (even before any redelivery), once the message was acked, nacked or
redelivered; no redelivery while a lease is live; invalid ids fail one by one while
valid ones in the same request are applied; with ordering, acking a message while
an earlier delivered message of its key is unacked fails with
TRANSIENT_FAILURE_UNORDERED_ACK_ID.
"""

from __future__ import annotations

import base64
import itertools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.core import names, validation
from eoclient.server_stub.core.delivery import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TRANSIENT_FAILURE_UNORDERED_ACK_ID,
    StreamFlow,
    SubscriptionDelivery,
)
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import (
    DEFAULT_ACK_DEADLINE,
    DEFAULT_EXACTLY_ONCE_ACK_DEADLINE,
    DEFAULT_EXPIRATION_TTL,
    DEFAULT_SUBSCRIPTION_RETENTION,
    DELETED_TOPIC,
    AckReply,
    DeadLetterPolicy,
    Delivery,
    ExpirationPolicy,
    NewMessage,
    Page,
    StoredMessage,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000


@dataclass
class _Topic:
    config: TopicConfig
    subscriptions: set[str] = field(default_factory=set)


@dataclass
class _Subscription:
    config: SubscriptionConfig  # defaults applied
    delivery: SubscriptionDelivery
    created: float
    last_activity: float


@dataclass
class AckFault:
    """An injected per-message ack/modack failure (test instrument)."""

    reason: str
    remaining: int  # how many more requests fail; < 0 = forever
    operations: frozenset[str]


@dataclass(frozen=True)
class _Resolved:
    ack_id: str
    failure: str  # "" when the id resolved to a live lease


Operation = Literal["ack", "modack"]


class Broker:
    """The whole service state. Pure apart from the injected clock and random source."""

    def __init__(
        self,
        clock: Clock,
        *,
        rng: random.Random | None = None,
        on_change: Callable[[str], None] | None = None,
        record_history: bool = True,
    ) -> None:
        self._clock = clock
        self._rng = rng or random.Random()  # seeded from os.urandom: ack ids differ across runs
        self._on_change = on_change
        self._topics: dict[str, _Topic] = {}
        self._subscriptions: dict[str, _Subscription] = {}
        self._seq = itertools.count(1)
        self._message_ids = itertools.count(1)
        self._stream_ids = itertools.count(1)
        self._stream_subscription: dict[int, str] = {}
        self._ack_faults: dict[tuple[str, str], AckFault] = {}
        self.history = History(enabled=record_history)

    def __repr__(self) -> str:
        return (
            f"<Broker [{len(self._topics)} topics, {len(self._subscriptions)} subscriptions, "
            f"{len(self._stream_subscription)} streams]>"
        )

    def set_listener(self, on_change: Callable[[str], None] | None) -> None:
        """Called with a subscription name whenever it may have something new to deliver."""
        self._on_change = on_change

    def _changed(self, subscription: str) -> None:
        if self._on_change is not None:
            self._on_change(subscription)

    # ================================================================ topics

    def create_topic(self, config: TopicConfig) -> TopicView:
        names.parse(config.name, "topics")
        if config.message_retention_duration is not None:
            validation.retention("message_retention_duration", config.message_retention_duration)
        if config.name in self._topics:
            raise AlreadyExists("Topic already exists")
        self._topics[config.name] = _Topic(config)
        return TopicView(config)

    def get_topic(self, name: str) -> TopicView:
        return TopicView(self._topic(name).config)

    def _topic(self, name: str) -> _Topic:
        names.parse(name, "topics")
        topic = self._topics.get(name)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return topic

    def update_topic(self, config: TopicConfig, paths: Sequence[str]) -> TopicView:
        """Apply the fields named by ``paths`` (snake_case field-mask paths) from ``config``."""
        topic = self._topic(config.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateTopicRequest must be set.")
        changes: dict[str, object] = {}
        for path in paths:
            if path == "labels":
                changes["labels"] = dict(config.labels)
            elif path == "message_retention_duration":
                if config.message_retention_duration is not None:
                    validation.retention(
                        "message_retention_duration", config.message_retention_duration
                    )
                changes["message_retention_duration"] = config.message_retention_duration
            elif path == "kms_key_name":
                changes["kms_key_name"] = config.kms_key_name
            else:
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateTopicRequest: the field {path!r} "
                    "is not a known or updatable Topic field."
                )
        topic.config = replace(topic.config, **changes)  # type: ignore[arg-type]
        return TopicView(topic.config)

    def list_topics(self, project: str, page_size: int, page_token: str) -> Page[TopicView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/topics/"
        matching = sorted(n for n in self._topics if n.startswith(prefix))
        page, token = _paginate(matching, page_size, page_token)
        return Page(tuple(TopicView(self._topics[n].config) for n in page), token)

    def list_topic_subscriptions(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        record = self._topic(topic)
        page, token = _paginate(sorted(record.subscriptions), page_size, page_token)
        return Page(tuple(page), token)

    def delete_topic(self, name: str) -> None:
        topic = self._topic(name)
        del self._topics[name]
        # Subscriptions outlive their topic; their topic field reads "_deleted-topic_"
        # (wire-contract §1.2) and their backlog stays deliverable.
        for subscription_name in topic.subscriptions:
            subscription = self._subscriptions[subscription_name]
            subscription.config = replace(subscription.config, topic=DELETED_TOPIC)

    # ========================================================= subscriptions

    def create_subscription(self, config: SubscriptionConfig) -> SubscriptionView:
        now = self._clock.now()
        if not config.name:
            # gRPC callers may omit the name: the server assigns one (proto comment).
            project = names.project_of(config.topic) if config.topic.count("/") == 3 else ""
            config = replace(
                config,
                name=f"projects/{project}/subscriptions/sub-{self._rng.getrandbits(64):016x}",
            )
        names.parse(config.name, "subscriptions")
        if not config.topic:
            raise InvalidArgument("The subscription's topic must be set.")
        names.parse(config.topic, "topics")
        config = self._validated_subscription(config)
        if config.name in self._subscriptions:
            raise AlreadyExists("Subscription already exists")
        topic = self._topics.get(config.topic)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(config.topic)}).")
        if config.dead_letter_policy is not None:
            self._topic(config.dead_letter_policy.dead_letter_topic)
        delivery = SubscriptionDelivery(
            uid=f"{self._rng.getrandbits(48):012x}",
            ordered=config.enable_message_ordering,
            exactly_once=config.enable_exactly_once_delivery,
            retry_policy=config.retry_policy,
            count_attempts=config.dead_letter_policy is not None,
        )
        self._subscriptions[config.name] = _Subscription(config, delivery, now, now)
        topic.subscriptions.add(config.name)
        return self._view(config.name)

    def _validated_subscription(self, config: SubscriptionConfig) -> SubscriptionConfig:
        """Validate ranges and apply the real service's defaults (wire-contract §1.2)."""
        if config.ack_deadline_seconds == 0:
            deadline = (
                DEFAULT_EXACTLY_ONCE_ACK_DEADLINE
                if config.enable_exactly_once_delivery
                else DEFAULT_ACK_DEADLINE
            )
            config = replace(config, ack_deadline_seconds=deadline)
        validation.ack_deadline(config.ack_deadline_seconds)
        retention = config.message_retention_duration
        if retention is None:
            retention = DEFAULT_SUBSCRIPTION_RETENTION
            config = replace(config, message_retention_duration=retention)
        validation.retention("message_retention_duration", retention)
        if config.expiration_policy is None:
            config = replace(config, expiration_policy=ExpirationPolicy(DEFAULT_EXPIRATION_TTL))
        assert config.expiration_policy is not None
        validation.expiration(config.expiration_policy, retention)
        validation.filter_length(config.filter)
        if config.dead_letter_policy is not None:
            policy = config.dead_letter_policy
            if policy.max_delivery_attempts == 0:
                policy = DeadLetterPolicy(policy.dead_letter_topic)
                config = replace(config, dead_letter_policy=policy)
            if not policy.dead_letter_topic:
                raise InvalidArgument("The dead_letter_policy.dead_letter_topic must be set.")
            names.parse(policy.dead_letter_topic, "topics")
            validation.dead_letter(policy)
        if config.retry_policy is not None:
            validation.retry(config.retry_policy)
        return config

    def _subscription(self, name: str) -> _Subscription:
        names.parse(name, "subscriptions")
        subscription = self._subscriptions.get(name)
        if subscription is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return subscription

    def _view(self, name: str) -> SubscriptionView:
        subscription = self._subscriptions[name]
        topic = self._topics.get(subscription.config.topic)
        return SubscriptionView(
            subscription.config,
            state_active=True,
            topic_message_retention_duration=(
                topic.config.message_retention_duration if topic else None
            ),
        )

    def get_subscription(self, name: str) -> SubscriptionView:
        self._subscription(name)
        return self._view(name)

    # Fields UpdateSubscription may change (snake_case mask paths). Ordering and the
    # filter are immutable after creation (wire-contract §1.2, §3).
    _MUTABLE_SUBSCRIPTION_FIELDS = frozenset(
        {
            "ack_deadline_seconds",
            "retain_acked_messages",
            "message_retention_duration",
            "labels",
            "expiration_policy",
            "dead_letter_policy",
            "retry_policy",
            "enable_exactly_once_delivery",
            "push_config",
            "bigquery_config",
            "cloud_storage_config",
        }
    )

    def update_subscription(
        self,
        config: SubscriptionConfig,
        paths: Sequence[str],
        merge_extras: Callable[[bytes, bytes, Sequence[str]], bytes] | None = None,
    ) -> SubscriptionView:
        """Apply the fields named by ``paths`` from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (push_config, ...) it keeps in ``extras``.
        """
        subscription = self._subscription(config.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateSubscriptionRequest must be set.")
        current = subscription.config
        updated = current
        for path in paths:
            top = path.split(".", 1)[0]
            if top in ("enable_message_ordering", "filter", "topic", "name"):
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateSubscriptionRequest: the {top} "
                    "field in the Subscription is not mutable."
                )
            if top not in self._MUTABLE_SUBSCRIPTION_FIELDS:
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateSubscriptionRequest: {path!r} "
                    "is not a known Subscription field."
                )
            if top in ("push_config", "bigquery_config", "cloud_storage_config"):
                if merge_extras is not None:
                    updated = replace(
                        updated, extras=merge_extras(updated.extras, config.extras, [path])
                    )
                continue
            value = getattr(config, top)
            if top == "ack_deadline_seconds" and value == 0:
                value = (
                    DEFAULT_EXACTLY_ONCE_ACK_DEADLINE
                    if updated.enable_exactly_once_delivery
                    else DEFAULT_ACK_DEADLINE
                )
            if top == "message_retention_duration" and value is None:
                value = DEFAULT_SUBSCRIPTION_RETENTION
            if top == "expiration_policy" and value is None:
                value = ExpirationPolicy(DEFAULT_EXPIRATION_TTL)
            updated = replace(updated, **{top: value})
        updated = self._validated_subscription(updated)
        if updated.dead_letter_policy is not None:
            self._topic(updated.dead_letter_policy.dead_letter_topic)
        subscription.config = updated
        delivery = subscription.delivery
        delivery.exactly_once = updated.enable_exactly_once_delivery
        delivery.retry_policy = updated.retry_policy
        delivery.count_attempts = updated.dead_letter_policy is not None
        return self._view(config.name)

    def list_subscriptions(
        self, project: str, page_size: int, page_token: str
    ) -> Page[SubscriptionView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/subscriptions/"
        matching = sorted(n for n in self._subscriptions if n.startswith(prefix))
        page, token = _paginate(matching, page_size, page_token)
        return Page(tuple(self._view(n) for n in page), token)

    def delete_subscription(self, name: str) -> None:
        subscription = self._subscription(name)
        del self._subscriptions[name]
        topic = self._topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        for stream_id, owner in list(self._stream_subscription.items()):
            if owner == name:
                del self._stream_subscription[stream_id]
        self._changed(name)

    def detach_subscription(self, name: str) -> None:
        subscription = self._subscription(name)
        topic = self._topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        subscription.config = replace(subscription.config, detached=True)
        self._changed(name)

    def subscription_exists(self, name: str) -> bool:
        return name in self._subscriptions

    # ================================================================ publish

    def publish(
        self, topic_name: str, messages: Sequence[NewMessage], request_bytes: int = 0
    ) -> list[str]:
        topic = self._topic(topic_name)
        validation.publish(messages, request_bytes)
        now = self._clock.now()
        ids: list[str] = []
        for new in messages:
            message_id = str(next(self._message_ids))
            stored = StoredMessage(
                message_id=message_id,
                data=new.data,
                attributes=dict(new.attributes),
                ordering_key=new.ordering_key,
                publish_time=now,
                size=_message_size(new),
            )
            seq = next(self._seq)
            for subscription_name in topic.subscriptions:
                self._subscriptions[subscription_name].delivery.add(seq, stored, now, now)
            ids.append(message_id)
        for subscription_name in topic.subscriptions:
            self._changed(subscription_name)
        return ids

    # ================================================================== pull

    def _pullable(self, name: str) -> _Subscription:
        subscription = self._subscription(name)
        if subscription.config.detached:
            raise FailedPrecondition(
                f"The subscription {name} is detached from its topic: it cannot be pulled."
            )
        return subscription

    def pull(self, name: str, max_messages: int) -> list[Delivery]:
        validation.pull_max_messages(max_messages)
        subscription = self._pullable(name)
        now = self._clock.now()
        subscription.last_activity = now
        deliveries = subscription.delivery.deliver(
            now,
            min(max_messages, validation.MAX_PULL_MESSAGES),
            subscription.config.ack_deadline_seconds,
        )
        self.history.delivered(name, deliveries, now, via="pull")
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
        subscription.last_activity = self._clock.now()
        self._stream_subscription[stream_id] = name
        return stream_id

    def set_stream_ack_deadline(self, stream_id: int, seconds: int) -> None:
        validation.stream_ack_deadline(seconds)
        subscription = self._stream_owner(stream_id)
        flow = subscription.delivery.stream(stream_id)
        if flow is not None:
            flow.ack_deadline = seconds

    def _stream_owner(self, stream_id: int) -> _Subscription:
        name = self._stream_subscription.get(stream_id)
        subscription = self._subscriptions.get(name) if name is not None else None
        if subscription is None:
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
        subscription.last_activity = now
        deliveries = subscription.delivery.deliver(now, max_messages, flow.ack_deadline, stream_id)
        self.history.delivered(subscription.config.name, deliveries, now, via="stream")
        return deliveries

    def close_stream(self, stream_id: int) -> None:
        name = self._stream_subscription.pop(stream_id, None)
        subscription = self._subscriptions.get(name) if name is not None else None
        if subscription is not None:
            subscription.delivery.close_stream(stream_id)

    def stream_subscription(self, stream_id: int) -> str | None:
        return self._stream_subscription.get(stream_id)

    def subscription_properties(self, name: str) -> tuple[bool, bool]:
        """(exactly_once_delivery_enabled, message_ordering_enabled)."""
        config = self._subscription(name).config
        return config.enable_exactly_once_delivery, config.enable_message_ordering

    # ========================================================= ack / modack

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> AckReply:
        subscription = self._subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        return self._apply(subscription, ack_ids, "ack", 0)

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> AckReply:
        subscription = self._subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        validation.modack_seconds(seconds)
        return self._apply(subscription, ack_ids, "modack", seconds)

    def _apply(
        self,
        subscription: _Subscription,
        ack_ids: Sequence[str],
        operation: Operation,
        seconds: int,
    ) -> AckReply:
        now = self._clock.now()
        name = subscription.config.name
        delivery = subscription.delivery
        delivery.advance(now)
        subscription.last_activity = now
        exactly_once = subscription.config.enable_exactly_once_delivery
        if not exactly_once:
            for ack_id in ack_ids:
                if not delivery.is_wellformed(ack_id):
                    # The real service rejects ids it never issued, even without
                    # exactly-once (the emulator: "Invalid ack id (ack_id=bogus)").
                    raise InvalidArgument(
                        f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
                    )
        confirmed: list[str] = []
        failures: dict[str, str] = {}
        changed = False
        for ack_id in ack_ids:
            entry = delivery.resolve(ack_id)
            fault = self._take_fault(name, entry.message.message_id if entry else "", operation)
            if fault:
                failures[ack_id] = fault
                self.history.answered(name, entry, ack_id, operation, seconds, now, fault)
                continue
            if entry is None:
                if exactly_once:
                    failures[ack_id] = PERMANENT_FAILURE_INVALID_ACK_ID
                    self.history.answered(
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
                stale = delivery.lookup_any_generation(ack_id) if operation == "ack" else None
                self.history.answered(name, stale, ack_id, operation, seconds, now, "")
                if stale is not None:
                    delivery.ack(stale)
                    changed = True
                confirmed.append(ack_id)
                continue
            if operation == "ack":
                if exactly_once and delivery.first_unacked_before(entry):
                    failures[ack_id] = TRANSIENT_FAILURE_UNORDERED_ACK_ID
                    self.history.answered(
                        name,
                        entry,
                        ack_id,
                        operation,
                        seconds,
                        now,
                        TRANSIENT_FAILURE_UNORDERED_ACK_ID,
                    )
                    continue
                self.history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.ack(entry)
            elif seconds == 0:
                self.history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.nack(entry, now)
            else:
                self.history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.extend(entry, now, seconds)
            changed = changed or operation == "ack" or seconds == 0
            confirmed.append(ack_id)
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
        if not message_id:
            return ""
        fault = self._ack_faults.get((subscription, message_id))
        if fault is None or operation not in fault.operations or fault.remaining == 0:
            return ""
        if fault.remaining > 0:
            fault.remaining -= 1
        return fault.reason

    # ================================================================== time

    def tick(self) -> None:
        """Process expired leases and elapsed backoffs; notify subscriptions with news."""
        now = self._clock.now()
        for name, subscription in self._subscriptions.items():
            wakeup = subscription.delivery.next_wakeup()
            if wakeup is not None and wakeup <= now:
                subscription.delivery.advance(now)
                if subscription.delivery.has_deliverable(now):
                    self._changed(name)

    def next_wakeup(self) -> float | None:
        """The earliest time ``tick`` has work to do (None: nothing scheduled)."""
        times = [
            t for s in self._subscriptions.values() if (t := s.delivery.next_wakeup()) is not None
        ]
        return min(times) if times else None

    def has_deliverable(self, name: str) -> bool:
        subscription = self._subscriptions.get(name)
        if subscription is None:
            return False
        return subscription.delivery.has_deliverable(self._clock.now())

    # ============================================================ introspection

    def backlog(self, name: str) -> int:
        """Messages of the subscription not acknowledged yet (waiting or outstanding)."""
        return self._subscription(name).delivery.backlog()

    def counters(self, name: str) -> Mapping[str, int]:
        counters = self._subscription(name).delivery.counters
        return {
            "delivered": counters.delivered,
            "acked": counters.acked,
            "nacked": counters.nacked,
            "expired": counters.expired,
        }


def _message_size(message: NewMessage) -> int:
    return (
        len(message.data)
        + sum(len(k.encode()) + len(v.encode()) for k, v in message.attributes.items())
        + len(message.ordering_key.encode())
    )


def _paginate(names_sorted: list[str], page_size: int, page_token: str) -> tuple[list[str], str]:
    """Page through sorted names; the token is the last name returned, base64url-encoded."""
    if page_size < 0:
        raise InvalidArgument(f"page_size must not be negative (you passed {page_size}).")
    size = min(page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
    start = 0
    if page_token:
        try:
            after = base64.urlsafe_b64decode(page_token.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            raise InvalidArgument(f"The page_token {page_token!r} is not valid.") from None
        start = next((i for i, n in enumerate(names_sorted) if n > after), len(names_sorted))
    page = names_sorted[start : start + size]
    more = start + size < len(names_sorted)
    token = base64.urlsafe_b64encode(page[-1].encode()).decode() if more and page else ""
    return page, token
