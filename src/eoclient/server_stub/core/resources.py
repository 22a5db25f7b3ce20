"""Topics and subscriptions: create, read, update (field masks), list, delete, detach.

Subscription policies (wire-contract §1.2, §1.5, §3) are validated here and handed to
each subscription's delivery state (``apply_policies``):

* filter: parsed at CreateSubscription (``filters``), immutable afterwards;
* retention: a subscription's messages live max(its message_retention_duration, its
  topic's message_retention_duration when set) after publish;
* expiration: a subscription idle for its expiration_policy.ttl is deleted by the
  broker's ``tick`` (``expires_at`` says when).

Every change is handed to the store as it is made.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, InvalidArgument, NotFound
from eoclient.server_stub.core import filters, names, validation
from eoclient.server_stub.core.ack_ids import new_uid
from eoclient.server_stub.core.delivery import Forwarder, SubscriptionDelivery
from eoclient.server_stub.core.model import (
    DEFAULT_ACK_DEADLINE,
    DEFAULT_EXACTLY_ONCE_ACK_DEADLINE,
    DEFAULT_EXPIRATION_TTL,
    DEFAULT_SUBSCRIPTION_RETENTION,
    DELETED_TOPIC,
    DeadLetterPolicy,
    ExpirationPolicy,
    Page,
    RetryPolicy,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)
from eoclient.server_stub.core.policies import SubscriptionPolicies, TopicPolicies
from eoclient.server_stub.core.store import (
    Store,
    StoredState,
    SubscriptionRecord,
    SubscriptionStorage,
)
from eoclient.server_stub.core.update_mask import MaskRules, MergeExtras, apply_update_mask


@dataclass
class TopicCounters:
    held_publishes: int = 0
    held_then_refused: int = 0
    refused_publishes: int = 0
    publish_requests: int = 0  # Publish requests that stored their messages
    published_messages: int = 0
    published_bytes: int = 0  # the requests' sizes (their serialized size, as the door got them)


@dataclass
class TopicState:
    config: TopicConfig
    subscriptions: set[str] = field(default_factory=set)  # its retention cursor too
    counters: TopicCounters = field(default_factory=TopicCounters)


def retention_cursor_name(topic: str) -> str:
    """The name of a topic's retention cursor (policies.py): not a subscription name
    (it does not parse as one), so no client can name, list or pull it."""
    return f"{topic}/retention-cursor"


@dataclass
class SubscriptionState:
    config: SubscriptionConfig  # defaults applied
    delivery: SubscriptionDelivery
    created: float
    # Pull, StreamingPull (opening, delivering, closing; an open stream keeps the
    # subscription active), Acknowledge, ModifyAckDeadline, UpdateSubscription.
    last_activity: float
    filter: filters.Filter | None = None

    def record(self) -> SubscriptionRecord:
        return SubscriptionRecord(self.config, self.created, self.last_activity, self.delivery.uid)


def _default_ack_deadline(config: SubscriptionConfig) -> int:
    return (
        DEFAULT_EXACTLY_ONCE_ACK_DEADLINE
        if config.enable_exactly_once_delivery
        else DEFAULT_ACK_DEADLINE
    )


def _subscription_value(field_name: str, value: Any, config: SubscriptionConfig) -> Any:
    """A value UpdateSubscription clears (0 / unset) means the service's default."""
    if field_name == "ack_deadline_seconds" and value == 0:
        return _default_ack_deadline(config)
    if field_name == "message_retention_duration" and value is None:
        return DEFAULT_SUBSCRIPTION_RETENTION
    if field_name == "expiration_policy" and value is None:
        return ExpirationPolicy(DEFAULT_EXPIRATION_TTL)
    return value


TOPIC_MASK = MaskRules(
    resource="Topic",
    mutable=frozenset({"labels", "message_retention_duration", "kms_key_name"}),
    immutable={"name": ""},
    # Topic fields the core does not model but UpdateTopic may change (kept in extras).
    opaque=frozenset(
        {
            "message_storage_policy",
            "schema_settings",
            "ingestion_data_source_settings",
            "message_transforms",
        }
    ),
)

# Ordering and the filter are immutable after creation (wire-contract §1.2, §3).
SUBSCRIPTION_MASK = MaskRules(
    resource="Subscription",
    mutable=frozenset(
        {
            "ack_deadline_seconds",
            "retain_acked_messages",
            "message_retention_duration",
            "labels",
            "expiration_policy",
            "dead_letter_policy",
            "retry_policy",
            "enable_exactly_once_delivery",
        }
    ),
    immutable={
        "enable_message_ordering": "",
        "filter": " Create a new subscription with the filter instead.",
        "topic": "",
        "name": "",
        "detached": " Use DetachSubscription.",
    },
    opaque=frozenset({"push_config", "bigquery_config", "cloud_storage_config"}),
    policies={
        "dead_letter_policy": DeadLetterPolicy(""),
        "retry_policy": RetryPolicy(),
        "expiration_policy": ExpirationPolicy(None),
    },
    value_of=_subscription_value,
)


class Resources:
    """Topics and subscriptions by name, and their lifecycle."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        store: Store,
        forwarder: Callable[[str], Forwarder],
        changed: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._store = store
        self._forwarder = forwarder
        self._changed = changed
        self.topics: dict[str, TopicState] = {}
        self.subscriptions: dict[str, SubscriptionState] = {}

    def restore(self, state: StoredState) -> None:
        """Rebuild from what the store kept: leases and ack-id uids as they were, every
        other unacknowledged message cold."""
        for config in state.topics:
            self.topics[config.name] = TopicState(config)
        for stored in state.subscriptions:
            record = stored.record
            subscription = self._new_subscription(record.config, record.created)
            subscription.last_activity = record.last_activity
            subscription.delivery.restore(stored)
            topic = self.topics.get(record.config.topic)
            if topic is not None and not record.config.detached:
                topic.subscriptions.add(record.config.name)
        # A data dir written before a topic's message_retention_duration had a cursor:
        # it gets one now (keeping what is published from here on).
        for topic in self.topics.values():
            self._sync_retention_cursor(topic)

    def set_topic_policies(self, name: str, policies: TopicPolicies) -> TopicView:
        """Replace the topic's Pulsar-style policies (validated; stored)."""
        topic = self.topic(name)
        policies.validate()
        topic.config = replace(topic.config, policies=policies)
        self._store.put_topic(topic.config)
        self._sync_retention_cursor(topic)
        for subscription_name in topic.subscriptions:
            self.apply_policies(self.subscriptions[subscription_name])
        return TopicView(topic.config)

    def set_subscription_policies(
        self, name: str, policies: SubscriptionPolicies
    ) -> SubscriptionView:
        subscription = self.subscription(name)
        policies.validate()
        subscription.config = replace(subscription.config, policies=policies)
        self._store.put_subscription(subscription.record())
        self.apply_policies(subscription)
        return self.view(name)

    def retention_cursor(self, topic: str) -> SubscriptionState | None:
        return self.subscriptions.get(retention_cursor_name(topic))

    def _sync_retention_cursor(self, topic: TopicState) -> None:
        """Create or remove the topic's retention cursor to match its retention.

        Two things keep every message the topic publishes, acknowledged or not: its
        Pulsar-style retention policy and Pub/Sub's own topic message_retention_duration
        ("allowing any subscription attached to the topic to seek back in time and
        replay previously-acked messages ... also allows a subscription to replay
        messages published before a subscription was created": Google's replay
        overview). One cursor serves both; its limits are their union.
        """
        name = retention_cursor_name(topic.config.name)
        retention = topic.config.policies.retention
        wanted = (retention is not None and retention.enabled) or (
            topic.config.message_retention_duration is not None
        )
        if wanted and name not in self.subscriptions:
            config = SubscriptionConfig(
                name,
                topic.config.name,
                ack_deadline_seconds=DEFAULT_ACK_DEADLINE,
                expiration_policy=ExpirationPolicy(None),
                internal=True,
            )
            cursor = self._new_subscription(config, self._clock.now())
            topic.subscriptions.add(name)
            self._store.put_subscription(cursor.record())
        elif not wanted and name in self.subscriptions:
            self.remove_subscription(name)

    def touch(self, subscription: SubscriptionState, now: float) -> None:
        subscription.last_activity = now
        self._store.touch_subscription(subscription.config.name, now)

    # ================================================================ topics

    def create_topic(self, config: TopicConfig) -> TopicView:
        names.parse(config.name, "topics")
        if config.message_retention_duration is not None:
            validation.retention("message_retention_duration", config.message_retention_duration)
        if config.name in self.topics:
            raise AlreadyExists("Topic already exists")
        topic = TopicState(config)
        self.topics[config.name] = topic
        self._store.put_topic(config)
        self._sync_retention_cursor(topic)
        return TopicView(config)

    def topic(self, name: str) -> TopicState:
        names.parse(name, "topics")
        topic = self.topics.get(name)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return topic

    def update_topic(
        self, config: TopicConfig, paths: Sequence[str], merge_extras: MergeExtras | None = None
    ) -> TopicView:
        """Apply the fields named by ``paths`` (snake_case field-mask paths) from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (schema_settings, message_storage_policy, ...) it keeps in ``extras``.
        """
        topic = self.topic(config.name)
        updated = apply_update_mask(topic.config, config, paths, TOPIC_MASK, merge_extras)
        if updated.message_retention_duration is not None:
            validation.retention("message_retention_duration", updated.message_retention_duration)
        topic.config = updated
        self._store.put_topic(updated)
        self._sync_retention_cursor(topic)
        for subscription_name in topic.subscriptions:
            self.apply_policies(self.subscriptions[subscription_name])
        return TopicView(topic.config)

    def list_topics(self, project: str, page_size: int, page_token: str) -> Page[TopicView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/topics/"
        matching = sorted(n for n in self.topics if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(TopicView(self.topics[n].config) for n in page), token)

    def list_topic_subscriptions(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        record = self.topic(topic)
        listed = sorted(n for n in record.subscriptions if n != retention_cursor_name(topic))
        page, token = names.paginate(listed, page_size, page_token)
        return Page(tuple(page), token)

    def delete_topic(self, name: str) -> None:
        topic = self.topic(name)
        cursor = retention_cursor_name(name)
        if cursor in self.subscriptions:
            self.remove_subscription(cursor)  # the topic's retention goes with it
        del self.topics[name]
        self._store.delete_topic(name)
        # Subscriptions outlive their topic; their topic field reads "_deleted-topic_"
        # (wire-contract §1.2) and their backlog stays deliverable.
        for subscription_name in topic.subscriptions:
            subscription = self.subscriptions[subscription_name]
            subscription.config = replace(subscription.config, topic=DELETED_TOPIC)
            self._store.put_subscription(subscription.record())
            self.apply_policies(subscription)  # the topic's retention no longer applies

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
        config = self._validated(config, explicit_expiration=config.expiration_policy is not None)
        if config.name in self.subscriptions:
            raise AlreadyExists("Subscription already exists")
        topic = self.topics.get(config.topic)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(config.topic)}).")
        if config.dead_letter_policy is not None:
            self.topic(config.dead_letter_policy.dead_letter_topic)
        subscription = self._new_subscription(config, now)
        topic.subscriptions.add(config.name)
        self._store.put_subscription(subscription.record())
        return self.view(config.name)

    def _new_subscription(self, config: SubscriptionConfig, now: float) -> SubscriptionState:
        """The in-memory state of a subscription, with a fresh ack-id uid."""
        delivery = SubscriptionDelivery(
            uid=new_uid(self._rng),
            storage=SubscriptionStorage(self._store, config.name),
            ordered=config.enable_message_ordering,
            exactly_once=config.enable_exactly_once_delivery,
            retry_policy=config.retry_policy,
            count_attempts=config.dead_letter_policy is not None,
            forward=self._forwarder(config.name),
        )
        subscription = SubscriptionState(
            config, delivery, now, now, filter=filters.parse(config.filter)
        )
        self.subscriptions[config.name] = subscription
        self.apply_policies(subscription)
        return subscription

    def apply_policies(self, subscription: SubscriptionState) -> None:
        """Hand the subscription's current policies to its delivery state."""
        config = subscription.config
        delivery = subscription.delivery
        delivery.exactly_once = config.enable_exactly_once_delivery
        delivery.retry_policy = config.retry_policy
        delivery.count_attempts = config.dead_letter_policy is not None
        delivery.max_delivery_attempts = (
            config.dead_letter_policy.max_delivery_attempts if config.dead_letter_policy else None
        )
        topic = self.topics.get(config.topic)
        topic_policies = topic.config.policies if topic is not None else None
        if config.internal:  # a retention cursor: the topic's retentions (union), no TTL
            delivery.retention = self.cursor_retention(topic.config) if topic else 0.0
            delivery.ttl = None
            delivery.set_retain_acked(False)
            return
        delivery.retention = self._retention(config)
        delivery.set_retain_acked(config.retain_acked_messages)
        # The subscription's TTL wins over its topic's (policies.py).
        ttl = config.policies.message_ttl
        if ttl is None and topic_policies is not None:
            ttl = topic_policies.message_ttl
        delivery.ttl = ttl

    @staticmethod
    def cursor_retention(topic: TopicConfig) -> float:
        """How long the topic's retention cursor keeps a message: the longer of its
        retention policy's time limit and its message_retention_duration."""
        policy = topic.policies.retention
        by_policy = policy.time_limit if policy is not None and policy.enabled else 0.0
        return max(by_policy, topic.message_retention_duration or 0.0)

    @staticmethod
    def cursor_keep_since(topic: TopicConfig, now: float) -> float:
        """Messages published at or after this stay whatever the policy's size limit:
        the topic's message_retention_duration keeps them (no size limit of its own)."""
        if topic.message_retention_duration is None:
            return math.inf
        return now - topic.message_retention_duration

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
        topic = self.topics.get(config.topic)
        if topic is not None and topic.config.message_retention_duration is not None:
            retention = max(retention, topic.config.message_retention_duration)
        return retention

    def _validated(
        self, config: SubscriptionConfig, *, explicit_expiration: bool
    ) -> SubscriptionConfig:
        """Validate ranges and apply the real service's defaults (wire-contract §1.2).

        "expiration_policy.ttl must be longer than message_retention_duration" applies to
        a policy the caller sets (``explicit_expiration``), not to the filled-in 31-day
        default: a subscription with 31-day retention and no policy is valid
        (wire-contract §7).
        """
        if config.ack_deadline_seconds == 0:
            config = replace(config, ack_deadline_seconds=_default_ack_deadline(config))
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

    def subscription(self, name: str) -> SubscriptionState:
        names.parse(name, "subscriptions")
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return subscription

    def view(self, name: str) -> SubscriptionView:
        subscription = self.subscriptions[name]
        topic = self.topics.get(subscription.config.topic)
        return SubscriptionView(
            subscription.config,
            state_active=True,
            topic_message_retention_duration=(
                topic.config.message_retention_duration if topic else None
            ),
        )

    def update_subscription(
        self,
        config: SubscriptionConfig,
        paths: Sequence[str],
        merge_extras: MergeExtras | None = None,
    ) -> SubscriptionView:
        """Apply the fields named by ``paths`` from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (push_config, ...) it keeps in ``extras``.
        """
        subscription = self.subscription(config.name)
        updated = apply_update_mask(
            subscription.config, config, paths, SUBSCRIPTION_MASK, merge_extras
        )
        # The policy counts as the caller's when this request sets one, or when the stored
        # one is not the filled-in default (an earlier request set it).
        sets_expiration = config.expiration_policy is not None and any(
            path.partition(".")[0] == "expiration_policy" for path in paths
        )
        explicit_expiration = sets_expiration or updated.expiration_policy != ExpirationPolicy(
            DEFAULT_EXPIRATION_TTL
        )
        updated = self._validated(updated, explicit_expiration=explicit_expiration)
        if updated.dead_letter_policy is not None:
            self.topic(updated.dead_letter_policy.dead_letter_topic)
        subscription.config = updated
        subscription.last_activity = self._clock.now()
        self._store.put_subscription(subscription.record())
        self.apply_policies(subscription)
        return self.view(config.name)

    def list_subscriptions(
        self, project: str, page_size: int, page_token: str
    ) -> Page[SubscriptionView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/subscriptions/"
        matching = sorted(n for n in self.subscriptions if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(self.view(n) for n in page), token)

    def delete_subscription(self, name: str) -> None:
        self.subscription(name)
        self.remove_subscription(name)

    def remove_subscription(self, name: str) -> None:
        """Deleted by a client or by its expiration policy."""
        subscription = self.subscriptions.pop(name)
        topic = self.topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        self._store.delete_subscription(name)
        self._changed(name)

    def detach_subscription(self, name: str) -> None:
        """Cut the subscription off its topic. "All messages retained in the subscription
        are dropped" (DetachSubscription's reference), "unacknowledged and acknowledged"
        (Google's detach sample): its backlog and retained messages go, and with a new
        uid every ack id issued before stops resolving."""
        subscription = self.subscription(name)
        topic = self.topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        subscription.config = replace(subscription.config, detached=True)
        self._store.put_subscription(subscription.record())
        subscription.delivery.reset(new_uid(self._rng), [], [], self._clock.now())
        self._changed(name)

    def expires_at(self, subscription: SubscriptionState, now: float) -> float:
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
            self.touch(subscription, now)
        return subscription.last_activity + policy.ttl
