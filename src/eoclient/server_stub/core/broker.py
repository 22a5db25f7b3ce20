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

Subscription policies (wire-contract §1.2, §1.5, §3; the details are in each method):

* filter: parsed at CreateSubscription (``filters``), applied at publish; a message
  that does not match is settled at once on that subscription, never delivered and
  never dead-lettered;
* dead letters: forwarded after max_delivery_attempts (see ``delivery``) with a new
  message id and the real service's CloudPubSubDeadLetter* attributes;
* retention: a subscription's messages live max(its message_retention_duration, its
  topic's message_retention_duration when set) after publish;
* expiration: a subscription idle for its expiration_policy.ttl is deleted by ``tick``.

Snapshots and seek (wire-contract §1.2): a snapshot records the subscription's
unacknowledged messages at creation and the topic's position (the last sequence
number published); what the topic publishes afterwards goes to a topic log
(``_TopicLog``) that exists only while a snapshot of the topic pins it. A seek rebuilds
the subscription's delivery state (``SubscriptionDelivery.reset``): to a time, from
what the subscription retains (unacked and retained acked messages); to a snapshot,
from the snapshot's messages and the log after its position. Snapshots expire 7 days
after the oldest message they retain and are removed by ``tick`` (or on access).
"""

from __future__ import annotations

import base64
import datetime
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.core import filters, names, validation
from eoclient.server_stub.core.delivery import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TRANSIENT_FAILURE_UNORDERED_ACK_ID,
    Forwarder,
    StreamFlow,
    SubscriptionDelivery,
    parse_ack_id,
)
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import (
    DEFAULT_ACK_DEADLINE,
    DEFAULT_EXACTLY_ONCE_ACK_DEADLINE,
    DEFAULT_EXPIRATION_TTL,
    DEFAULT_SUBSCRIPTION_RETENTION,
    DELETED_TOPIC,
    SNAPSHOT_LIFETIME,
    SNAPSHOT_MIN_LIFETIME,
    AckReply,
    DeadLetterPolicy,
    Delivery,
    ExpirationPolicy,
    NewMessage,
    Page,
    RetryPolicy,
    SnapshotView,
    StoredMessage,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)

DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000

# Attributes the real service adds to a dead-lettered message (wire-contract §1.5,
# confirmed by the emulator's output).
DEAD_LETTER_DELIVERY_COUNT = "CloudPubSubDeadLetterSourceDeliveryCount"
DEAD_LETTER_SUBSCRIPTION = "CloudPubSubDeadLetterSourceSubscription"
DEAD_LETTER_SUBSCRIPTION_PROJECT = "CloudPubSubDeadLetterSourceSubscriptionProject"
DEAD_LETTER_PUBLISH_TIME = "CloudPubSubDeadLetterSourceTopicPublishTime"

# Sub-fields UpdateSubscription accepts in dotted mask paths ("retry_policy.maximum_backoff").
_POLICY_DEFAULTS: dict[str, Any] = {
    "dead_letter_policy": DeadLetterPolicy(""),
    "retry_policy": RetryPolicy(),
    "expiration_policy": ExpirationPolicy(None),
}


@dataclass
class _Topic:
    config: TopicConfig
    subscriptions: set[str] = field(default_factory=set)


@dataclass
class _Subscription:
    config: SubscriptionConfig  # defaults applied
    delivery: SubscriptionDelivery
    created: float
    # Pull, StreamingPull (opening, delivering, closing; an open stream keeps the
    # subscription active), Acknowledge, ModifyAckDeadline, UpdateSubscription.
    last_activity: float
    filter: filters.Filter | None = None


@dataclass
class _Snapshot:
    name: str
    topic: str
    expire_time: float
    labels: dict[str, str]
    backlog: dict[int, StoredMessage]  # the subscription's unacked messages at creation
    position: int  # the last seq published when it was created

    def view(self) -> SnapshotView:
        return SnapshotView(self.name, self.topic, self.expire_time, dict(self.labels))


@dataclass
class _TopicLog:
    """What a topic published since its oldest snapshot (seq order); exists while pinned."""

    messages: deque[tuple[int, StoredMessage]] = field(default_factory=deque)


@dataclass
class AckFault:
    """An injected per-message ack/modack failure (test instrument)."""

    reason: str
    remaining: int  # how many more requests fail; < 0 = forever
    operations: frozenset[str]


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
        self._snapshots: dict[str, _Snapshot] = {}
        self._logs: dict[str, _TopicLog] = {}  # by topic name, while a snapshot pins it
        self._last_seq = 0
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

    # Topic fields the core does not model but UpdateTopic may change (kept in extras).
    _OPAQUE_TOPIC_FIELDS = frozenset(
        {
            "message_storage_policy",
            "schema_settings",
            "ingestion_data_source_settings",
            "message_transforms",
        }
    )

    def update_topic(
        self,
        config: TopicConfig,
        paths: Sequence[str],
        merge_extras: Callable[[bytes, bytes, Sequence[str]], bytes] | None = None,
    ) -> TopicView:
        """Apply the fields named by ``paths`` (snake_case field-mask paths) from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (schema_settings, message_storage_policy, ...) it keeps in ``extras``.
        """
        topic = self._topic(config.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateTopicRequest must be set.")
        changes: dict[str, object] = {}
        extras = topic.config.extras
        for path in paths:
            top = path.split(".", 1)[0]
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
            elif top in self._OPAQUE_TOPIC_FIELDS:
                if merge_extras is not None:
                    extras = merge_extras(extras, config.extras, [path])
            elif top == "name":
                raise InvalidArgument(
                    "Invalid update_mask provided in the UpdateTopicRequest: the name field in "
                    "the Topic is not mutable."
                )
            else:
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateTopicRequest: the field {path!r} "
                    "is not a known or updatable Topic field."
                )
        changes["extras"] = extras
        topic.config = replace(topic.config, **changes)  # type: ignore[arg-type]
        for subscription_name in topic.subscriptions:
            self._apply_policies(self._subscriptions[subscription_name])
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
            self._apply_policies(subscription)  # the topic's retention no longer applies

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
        config = self._validated_subscription(
            config, explicit_expiration=config.expiration_policy is not None
        )
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
            forward=self._forwarder(config.name),
        )
        subscription = _Subscription(
            config, delivery, now, now, filter=filters.parse(config.filter)
        )
        self._subscriptions[config.name] = subscription
        self._apply_policies(subscription)
        topic.subscriptions.add(config.name)
        return self._view(config.name)

    def _apply_policies(self, subscription: _Subscription) -> None:
        """Hand the subscription's current policies to its delivery state."""
        config = subscription.config
        delivery = subscription.delivery
        delivery.exactly_once = config.enable_exactly_once_delivery
        delivery.retry_policy = config.retry_policy
        delivery.count_attempts = config.dead_letter_policy is not None
        delivery.max_delivery_attempts = (
            config.dead_letter_policy.max_delivery_attempts if config.dead_letter_policy else None
        )
        delivery.retention = self._retention(config)
        delivery.set_retain_acked(config.retain_acked_messages)

    def _retention(self, config: SubscriptionConfig) -> float:
        """How long the subscription keeps a message after its publish time.

        Its own message_retention_duration ("How long to retain unacknowledged messages
        in the subscription's backlog, from the moment a message is published"), unless
        its topic sets a longer one: the topic's is a minimum ("messages published to
        the topic in the last message_retention_duration are always available to
        subscribers") — both from the google.pubsub.v1 proto comments. Hence the max.
        """
        retention = config.message_retention_duration
        if retention is None:
            retention = DEFAULT_SUBSCRIPTION_RETENTION
        topic = self._topics.get(config.topic)
        if topic is not None and topic.config.message_retention_duration is not None:
            retention = max(retention, topic.config.message_retention_duration)
        return retention

    def _validated_subscription(
        self, config: SubscriptionConfig, *, explicit_expiration: bool
    ) -> SubscriptionConfig:
        """Validate ranges and apply the real service's defaults (wire-contract §1.2).

        "expiration_policy.ttl must be longer than message_retention_duration" applies to
        a policy the caller sets (``explicit_expiration``), not to the filled-in 31-day
        default: a subscription with 31-day retention and no policy is valid
        (wire-contract §7).
        """
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
        validation.expiration(config.expiration_policy, retention if explicit_expiration else None)
        validation.filter_length(config.filter)
        filters.parse(config.filter)  # InvalidArgument naming the column of the error
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
            top, _, rest = path.partition(".")
            if top in ("enable_message_ordering", "filter", "topic", "name", "detached"):
                hint = {
                    "filter": " Create a new subscription with the filter instead.",
                    "detached": " Use DetachSubscription.",
                }.get(top, "")
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateSubscriptionRequest: the {top} "
                    f"field in the Subscription is not mutable.{hint}"
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
            if rest:
                updated = replace(updated, **{top: self._merged_policy(updated, config, path)})
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
        # The policy counts as the caller's when this request sets one, or when the stored
        # one is not the filled-in default (an earlier request set it).
        sets_expiration = config.expiration_policy is not None and any(
            path.partition(".")[0] == "expiration_policy" for path in paths
        )
        explicit_expiration = sets_expiration or updated.expiration_policy != ExpirationPolicy(
            DEFAULT_EXPIRATION_TTL
        )
        updated = self._validated_subscription(updated, explicit_expiration=explicit_expiration)
        if updated.dead_letter_policy is not None:
            self._topic(updated.dead_letter_policy.dead_letter_topic)
        subscription.config = updated
        subscription.last_activity = self._clock.now()
        self._apply_policies(subscription)
        return self._view(config.name)

    @staticmethod
    def _merged_policy(current: SubscriptionConfig, request: SubscriptionConfig, path: str) -> Any:
        """A dotted mask path: change one field of a policy, keep its others."""
        top, _, field_name = path.partition(".")
        default = _POLICY_DEFAULTS.get(top)
        if default is None or field_name not in {f.name for f in fields(default)}:
            raise InvalidArgument(
                f"Invalid update_mask provided in the UpdateSubscriptionRequest: {path!r} "
                "is not a known Subscription field."
            )
        base = getattr(current, top) or default
        source = getattr(request, top)
        value = getattr(source if source is not None else default, field_name)
        return replace(base, **{field_name: value})

    def list_subscriptions(
        self, project: str, page_size: int, page_token: str
    ) -> Page[SubscriptionView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/subscriptions/"
        matching = sorted(n for n in self._subscriptions if n.startswith(prefix))
        page, token = _paginate(matching, page_size, page_token)
        return Page(tuple(self._view(n) for n in page), token)

    def delete_subscription(self, name: str) -> None:
        self._subscription(name)
        self._remove_subscription(name)

    def _remove_subscription(self, name: str) -> None:
        subscription = self._subscriptions.pop(name)
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
        return self._publish_to(topic, messages, self._clock.now())

    def _publish_to(self, topic: _Topic, messages: Sequence[NewMessage], now: float) -> list[str]:
        """Store ``messages`` on every subscription of ``topic`` whose filter they match."""
        ids: list[str] = []
        receivers: set[str] = set()
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
            seq = self._last_seq = next(self._seq)
            log = self._logs.get(topic.config.name)
            if log is not None:
                log.messages.append((seq, stored))
            for subscription_name in topic.subscriptions:
                subscription = self._subscriptions[subscription_name]
                if subscription.filter is not None and not subscription.filter.matches(
                    stored.attributes
                ):
                    # "Pub/Sub automatically acknowledges the messages that don't match
                    # the filter" (filter page): never delivered, never dead-lettered.
                    subscription.delivery.filtered()
                    continue
                subscription.delivery.add(seq, stored, now, now)
                receivers.add(subscription_name)
            ids.append(message_id)
        for subscription_name in receivers:
            self._changed(subscription_name)
        return ids

    # ========================================================== dead letters

    def _forwarder(self, subscription_name: str) -> Forwarder:
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
        subscription = self._subscriptions.get(name)
        policy = subscription.config.dead_letter_policy if subscription else None
        topic = self._topics.get(policy.dead_letter_topic) if policy else None
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
        self.history.forwarded(
            name, message.message_id, now, topic.config.name, new_id, delivery_count
        )
        return True

    # ================================================================== pull

    def _pullable(self, name: str) -> _Subscription:
        subscription = self._subscription(name)
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
        subscription.last_activity = now
        deliveries = subscription.delivery.deliver(
            now,
            min(max_messages, validation.MAX_PULL_MESSAGES),
            subscription.config.ack_deadline_seconds,
            max_bytes=max_bytes,
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
            subscription.last_activity = self._clock.now()  # connected until now

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
        for ack_id, parts in zip(ack_ids, parsed, strict=True):
            entry = delivery.resolve_parts(parts)
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
                stale = delivery.lookup_parts(parts) if operation == "ack" else None
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

    # ============================================================= snapshots

    def create_snapshot(
        self, name: str, subscription: str, labels: Mapping[str, str] | None = None
    ) -> SnapshotView:
        """Capture the subscription's unacked backlog and the topic's position.

        ``name`` may be empty (gRPC): the server assigns one in the subscription's project.
        The snapshot expires 7 days after the oldest message it retains (now when there
        is none); refused with FAILED_PRECONDITION when that is less than an hour away.
        """
        now = self._clock.now()
        self._expire_snapshots(now)
        if not name:
            project, _ = names.parse(subscription, "subscriptions")
            name = f"projects/{project}/snapshots/snapshot-{self._rng.getrandbits(64):016x}"
        names.parse(name, "snapshots")
        if not subscription:
            raise InvalidArgument("The snapshot's subscription must be set.")
        if name in self._snapshots:
            raise AlreadyExists("Snapshot already exists")
        source = self._subscription(subscription)
        source.delivery.advance(now)
        backlog = dict(source.delivery.unacked())
        oldest = min((m.publish_time for m in backlog.values()), default=now)
        expire_time = oldest + SNAPSHOT_LIFETIME
        if expire_time - now < SNAPSHOT_MIN_LIFETIME:
            age = now - oldest
            raise FailedPrecondition(
                f"The snapshot cannot be created: the oldest unacknowledged message of "
                f"{subscription} was published {age / 3600:.1f} h ago, so the snapshot would "
                "expire within an hour (a snapshot expires 7 days after the oldest message it "
                "retains)."
            )
        topic = source.config.topic
        snapshot = _Snapshot(name, topic, expire_time, dict(labels or {}), backlog, self._last_seq)
        self._snapshots[name] = snapshot
        self._logs.setdefault(topic, _TopicLog())
        return snapshot.view()

    def _expire_snapshots(self, now: float) -> None:
        expired = [n for n, s in self._snapshots.items() if s.expire_time <= now]
        for name in expired:
            self._drop_snapshot(name)

    def _drop_snapshot(self, name: str) -> None:
        """Forget the snapshot and unpin what only it kept in its topic's log."""
        topic = self._snapshots.pop(name).topic
        log = self._logs.get(topic)
        if log is None:
            return
        positions = [s.position for s in self._snapshots.values() if s.topic == topic]
        if not positions:
            del self._logs[topic]
            return
        floor = min(positions)
        while log.messages and log.messages[0][0] <= floor:
            log.messages.popleft()

    def _snapshot(self, name: str) -> _Snapshot:
        names.parse(name, "snapshots")
        self._expire_snapshots(self._clock.now())
        snapshot = self._snapshots.get(name)
        if snapshot is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return snapshot

    def get_snapshot(self, name: str) -> SnapshotView:
        return self._snapshot(name).view()

    def list_snapshots(self, project: str, page_size: int, page_token: str) -> Page[SnapshotView]:
        project_id = names.parse_project(project)
        self._expire_snapshots(self._clock.now())
        prefix = f"projects/{project_id}/snapshots/"
        matching = sorted(n for n in self._snapshots if n.startswith(prefix))
        page, token = _paginate(matching, page_size, page_token)
        return Page(tuple(self._snapshots[n].view() for n in page), token)

    def list_topic_snapshots(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        self._topic(topic)
        self._expire_snapshots(self._clock.now())
        matching = sorted(n for n, s in self._snapshots.items() if s.topic == topic)
        page, token = _paginate(matching, page_size, page_token)
        return Page(tuple(page), token)

    def update_snapshot(self, snapshot: SnapshotView, paths: Sequence[str]) -> SnapshotView:
        """Apply ``labels`` and/or ``expire_time`` (field-mask paths) from ``snapshot``."""
        record = self._snapshot(snapshot.name)
        if not paths:
            raise InvalidArgument("The update_mask in the UpdateSnapshotRequest must be set.")
        labels, expire_time = record.labels, record.expire_time
        for path in paths:
            if path == "labels":
                labels = dict(snapshot.labels)
            elif path == "expire_time":
                if snapshot.expire_time <= self._clock.now():
                    raise InvalidArgument(
                        "Invalid update_mask provided in the UpdateSnapshotRequest: the "
                        "expire_time must be in the future."
                    )
                expire_time = snapshot.expire_time
            else:
                raise InvalidArgument(
                    f"Invalid update_mask provided in the UpdateSnapshotRequest: {path!r} is "
                    "not an updatable Snapshot field (labels, expire_time)."
                )
        record.labels, record.expire_time = labels, expire_time
        return record.view()

    def delete_snapshot(self, name: str) -> None:
        self._snapshot(name)
        self._drop_snapshot(name)

    # ================================================================== seek

    def seek(self, name: str, *, time: float | None = None, snapshot: str | None = None) -> None:
        """Seek to a time (retained messages published before it acked, the others
        unacked; a future time purges) or to a snapshot (its ack state).

        Every ack id issued before is invalid afterwards, and every message left
        unacked is delivered again.
        """
        subscription = self._subscription(name)
        now = self._clock.now()
        delivery = subscription.delivery
        delivery.advance(now)
        current = delivery.unacked() + delivery.retained.items()
        if snapshot:
            record = self._snapshot(snapshot)
            if record.topic != subscription.config.topic:
                raise FailedPrecondition(
                    f"The snapshot {snapshot} retains messages of topic {record.topic}, but "
                    f"the subscription {name} is attached to topic "
                    f"{subscription.config.topic}: they must be the same topic."
                )
            target = dict(record.backlog)
            log = self._logs.get(record.topic)
            for seq, message in log.messages if log is not None else ():
                if seq > record.position and (
                    subscription.filter is None or subscription.filter.matches(message.attributes)
                ):
                    target[seq] = message
            unacked = list(target.items())
            acked = [(seq, m) for seq, m in current if seq not in target]
        elif time is not None:
            unacked = [(seq, m) for seq, m in current if m.publish_time >= time]
            acked = [(seq, m) for seq, m in current if m.publish_time < time]
        else:
            raise InvalidArgument("The seek target must be set: a time or a snapshot.")
        delivery.reset(f"{self._rng.getrandbits(48):012x}", unacked, acked, now)
        subscription.last_activity = now
        self._changed(name)

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
        """Process expired leases, elapsed backoffs, retention and expiration policies;
        notify subscriptions with news."""
        now = self._clock.now()
        idle: list[str] = []
        for name, subscription in self._subscriptions.items():
            if self._expires_at(subscription, now) <= now:
                idle.append(name)
                continue
            wakeup = subscription.delivery.next_wakeup()
            if wakeup is not None and wakeup <= now:
                subscription.delivery.advance(now)
                if subscription.delivery.has_deliverable(now):
                    self._changed(name)
        for name in idle:
            self._remove_subscription(name)
        self._expire_snapshots(now)

    def _expires_at(self, subscription: _Subscription, now: float) -> float:
        """When the subscription's expiration policy deletes it (inf: never).

        "A subscription is considered active as long as any connected subscriber is
        successfully consuming messages from the subscription or is issuing operations
        on the subscription" (proto comment of Subscription.expiration_policy): here a
        Pull, Acknowledge, ModifyAckDeadline or UpdateSubscription, or a StreamingPull
        for as long as it stays open. ttl None: never expires.
        """
        policy = subscription.config.expiration_policy
        if policy is None or policy.ttl is None:
            return float("inf")
        if subscription.delivery.open_stream_count():
            subscription.last_activity = now
        return subscription.last_activity + policy.ttl

    def next_wakeup(self) -> float | None:
        """The earliest time ``tick`` has work to do (None: nothing scheduled)."""
        now = self._clock.now()
        times: list[float] = []
        for subscription in self._subscriptions.values():
            wakeup = subscription.delivery.next_wakeup()
            if wakeup is not None:
                times.append(wakeup)
            expires = self._expires_at(subscription, now)
            if expires != float("inf"):
                times.append(expires)
        times.extend(snapshot.expire_time for snapshot in self._snapshots.values())
        return min(times) if times else None

    def has_deliverable(self, name: str) -> bool:
        subscription = self._subscriptions.get(name)
        if subscription is None:
            return False
        return subscription.delivery.has_deliverable(self._clock.now())

    # ============================================================ introspection

    def _up_to_date(self, name: str) -> SubscriptionDelivery:
        """The subscription's delivery state with due expiries and retention processed
        (they are otherwise processed lazily, at the next call that needs them)."""
        delivery = self._subscription(name).delivery
        delivery.advance(self._clock.now())
        return delivery

    def backlog(self, name: str) -> int:
        """Messages of the subscription not acknowledged yet (waiting or outstanding)."""
        return self._up_to_date(name).backlog()

    def counters(self, name: str) -> Mapping[str, int]:
        counters = self._up_to_date(name).counters
        return {
            "delivered": counters.delivered,
            "acked": counters.acked,
            "nacked": counters.nacked,
            "expired": counters.expired,
            "dead_lettered": counters.dead_lettered,
            "filtered": counters.filtered,
            "discarded": counters.discarded,
        }

    def retained_acked(self, name: str) -> list[StoredMessage]:
        """Acknowledged messages the subscription keeps (retain_acked_messages), oldest first."""
        return [m for _, m in self._up_to_date(name).retained.items()]


def rfc3339_millis(seconds: float) -> str:
    """``2026-11-22T03:06:25.555Z``: the form of CloudPubSubDeadLetterSourceTopicPublishTime."""
    moment = datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


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
