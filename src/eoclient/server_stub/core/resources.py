"""The registry of topics and subscriptions: their state by name, and what ties them.

``topics.py`` and ``subscriptions.py`` answer the RPCs on each kind; this is what both
rely on, and what publishing, leasing, acks and snapshots look subscriptions up in:

* lookups that raise NOT_FOUND (``topic``, ``subscription``) and the subscription view;
* each subscription's delivery state, built with a fresh ack-id uid and kept in step with
  its policies (``apply_policies``): retention lives max(its message_retention_duration,
  its topic's when set) after publish, the message TTL is the subscription's or else its
  topic's;
* a topic's retention cursor: the internal subscription that keeps what the topic's
  retention policy and message_retention_duration keep (``sync_retention_cursor``);
* activity and expiration: a subscription idle for its expiration_policy.ttl is deleted
  by the broker's ``tick`` (``expires_at`` says when).

Every change is handed to the store as it is made.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from eoclient._clock import Clock
from eoclient.errors import NotFound
from eoclient.server_stub.core import filters, names
from eoclient.server_stub.core.ack_ids import new_uid
from eoclient.server_stub.core.delivery import Forwarder, SubscriptionDelivery
from eoclient.server_stub.core.model import (
    DEFAULT_ACK_DEADLINE,
    DEFAULT_SUBSCRIPTION_RETENTION,
    ExpirationPolicy,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
)
from eoclient.server_stub.core.store import (
    Store,
    StoredState,
    SubscriptionRecord,
    SubscriptionStorage,
)


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


class Resources:
    """Topics and subscriptions by name, and what ties them."""

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
            subscription = self.new_subscription(record.config, record.created)
            subscription.last_activity = record.last_activity
            subscription.delivery.restore(stored)
            topic = self.topics.get(record.config.topic)
            if topic is not None and not record.config.detached:
                topic.subscriptions.add(record.config.name)
        # A data dir written before a topic's message_retention_duration had a cursor:
        # it gets one now (keeping what is published from here on).
        for topic in self.topics.values():
            self.sync_retention_cursor(topic)

    def retention_cursor(self, topic: str) -> SubscriptionState | None:
        return self.subscriptions.get(retention_cursor_name(topic))

    def sync_retention_cursor(self, topic: TopicState) -> None:
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
            cursor = self.new_subscription(config, self._clock.now())
            topic.subscriptions.add(name)
            self._store.resources.put_subscription(cursor.record())
        elif not wanted and name in self.subscriptions:
            self.remove_subscription(name)

    def touch(self, subscription: SubscriptionState, now: float) -> None:
        subscription.last_activity = now
        self._store.resources.touch_subscription(subscription.config.name, now)

    def topic(self, name: str) -> TopicState:
        names.parse(name, "topics")
        topic = self.topics.get(name)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(name)}).")
        return topic

    def new_subscription(self, config: SubscriptionConfig, now: float) -> SubscriptionState:
        """The in-memory state of a subscription, with a fresh ack-id uid."""
        delivery = SubscriptionDelivery(
            uid=new_uid(self._rng),
            storage=SubscriptionStorage(self._store, config.name),
            ordered=config.enable_message_ordering,
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
        rules = delivery.rules
        rules.retry_policy = config.retry_policy
        rules.count_attempts = config.dead_letter_policy is not None
        rules.max_delivery_attempts = (
            config.dead_letter_policy.max_delivery_attempts if config.dead_letter_policy else None
        )
        topic = self.topics.get(config.topic)
        topic_policies = topic.config.policies if topic is not None else None
        if config.internal:  # a retention cursor: the topic's retentions (union), no TTL
            rules.retention = self.cursor_retention(topic.config) if topic else 0.0
            rules.ttl = None
            delivery.set_retain_acked(False)
            return
        rules.retention = self._retention(config)
        delivery.set_retain_acked(config.retain_acked_messages)
        # The subscription's TTL wins over its topic's (policies.py).
        ttl = config.policies.message_ttl
        if ttl is None and topic_policies is not None:
            ttl = topic_policies.message_ttl
        rules.ttl = ttl

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

    def remove_subscription(self, name: str) -> None:
        """Deleted by a client or by its expiration policy."""
        subscription = self.subscriptions.pop(name)
        topic = self.topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        self._store.delete_subscription(name)
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
        if subscription.delivery.streams:
            self.touch(subscription, now)
        return subscription.last_activity + policy.ttl
