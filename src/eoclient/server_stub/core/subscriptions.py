"""Subscriptions: create, read, update (field masks), list, delete, detach, and their
Pulsar-style policies.

Subscription settings (docs/protocol.md#subscription-properties-and-defaults) are validated here,
with the real
service's defaults filled in, and handed to the subscription's delivery state through the
registry (``Resources.apply_policies``):

* filter: parsed at CreateSubscription (``filters``), immutable afterwards;
* ack deadline, retention, expiration, dead-letter and retry policies: checked ranges
  (``validation``); a value UpdateSubscription clears means the service's default.
"""

from __future__ import annotations

import builtins
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists, InvalidArgument, NotFound
from eoclient.server_stub.core import filters, labels, names, validation
from eoclient.server_stub.core.ack_ids import new_uid
from eoclient.server_stub.core.model import (
    DEFAULT_ACK_DEADLINE,
    DEFAULT_EXACTLY_ONCE_ACK_DEADLINE,
    DEFAULT_EXPIRATION_TTL,
    DEFAULT_SUBSCRIPTION_RETENTION,
    DeadLetterPolicy,
    ExpirationPolicy,
    Page,
    RetryPolicy,
    SubscriptionConfig,
    SubscriptionView,
)
from eoclient.server_stub.core.policies import SubscriptionPolicies, SubscriptionPolicyCounters
from eoclient.server_stub.core.resources import Resources
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.core.update_mask import MaskRules, MergeExtras, apply_update_mask


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


# Ordering and the filter are immutable after creation (docs/protocol.md#update-masks).
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
    opaque=frozenset(
        {"push_config", "bigquery_config", "cloud_storage_config", "message_transforms"}
    ),
    policies={
        "dead_letter_policy": DeadLetterPolicy(""),
        "retry_policy": RetryPolicy(),
        "expiration_policy": ExpirationPolicy(None),
    },
    value_of=_subscription_value,
)


class Subscriptions:
    """The subscription RPCs over the registry."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        store: Store,
        resources: Resources,
        changed: Callable[[str], None],
        deleted: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._rng = rng
        self._store = store
        self._resources = resources
        self._changed = changed
        self._deleted = deleted  # a deleted resource's name (its IAM policy goes with it)

    def create(self, config: SubscriptionConfig) -> SubscriptionView:
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
        if config.name in self._resources.subscriptions:
            raise AlreadyExists("Subscription already exists")
        topic = self._resources.topics.get(config.topic)
        if topic is None:
            raise NotFound(f"Resource not found (resource={names.short_id(config.topic)}).")
        if config.dead_letter_policy is not None:
            self._resources.topic(config.dead_letter_policy.dead_letter_topic)
        subscription = self._resources.new_subscription(config, now)
        topic.subscriptions.add(config.name)
        self._store.resources.put_subscription(subscription.record())
        return self._resources.view(config.name)

    def update(
        self,
        config: SubscriptionConfig,
        paths: Sequence[str],
        merge_extras: MergeExtras | None = None,
    ) -> SubscriptionView:
        """Apply the fields named by ``paths`` from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (push_config, ...) it keeps in ``extras``.
        """
        subscription = self._resources.subscription(config.name)
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
            self._resources.topic(updated.dead_letter_policy.dead_letter_topic)
        subscription.config = updated
        subscription.last_activity = self._clock.now()
        self._store.resources.put_subscription(subscription.record())
        self._resources.apply_policies(subscription)
        return self._resources.view(config.name)

    def list(self, project: str, page_size: int, page_token: str) -> Page[SubscriptionView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/subscriptions/"
        matching = sorted(n for n in self._resources.subscriptions if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(self._resources.view(n) for n in page), token)

    def detach(self, name: str) -> None:
        """Cut the subscription off its topic. "All messages retained in the subscription
        are dropped" (DetachSubscription's reference), "unacknowledged and acknowledged"
        (Google's detach sample): its backlog and retained messages go, and with a new
        uid every ack id issued before stops resolving."""
        subscription = self._resources.subscription(name)
        topic = self._resources.topics.get(subscription.config.topic)
        if topic is not None:
            topic.subscriptions.discard(name)
        subscription.config = replace(subscription.config, detached=True)
        self._store.resources.put_subscription(subscription.record())
        subscription.delivery.reset(new_uid(self._rng), [], [], self._clock.now())
        self._changed(name)

    def _validated(
        self, config: SubscriptionConfig, *, explicit_expiration: bool
    ) -> SubscriptionConfig:
        """Validate ranges and apply the real service's defaults
        (docs/protocol.md#subscription-properties-and-defaults).

        "expiration_policy.ttl must be longer than message_retention_duration" applies to
        a policy the caller sets (``explicit_expiration``), not to the filled-in 31-day
        default: a subscription with 31-day retention and no policy is valid
        (docs/protocol.md#retention-and-expiration).
        """
        labels.check(config.labels)
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

    def get(self, name: str) -> SubscriptionView:
        self._resources.subscription(name)
        return self._resources.view(name)

    def delete(self, name: str) -> None:
        self._resources.subscription(name)
        self._resources.remove_subscription(name)
        self._deleted(name)

    def exists(self, name: str) -> bool:
        return name in self._resources.subscriptions

    def visible_names(self) -> builtins.list[str]:  # ``list`` is a method here
        """Every subscription a client sees (push delivery scans them for push configs)."""
        return [n for n, s in self._resources.subscriptions.items() if not s.config.internal]

    def properties(self, name: str) -> tuple[bool, bool]:
        """(exactly_once_delivery_enabled, message_ordering_enabled)."""
        config = self._resources.subscription(name).config
        return config.enable_exactly_once_delivery, config.enable_message_ordering

    # ================================================= Pulsar-style policies

    def policies(self, name: str) -> SubscriptionPolicies:
        return self._resources.subscription(name).config.policies

    def set_policies(self, name: str, policies: SubscriptionPolicies) -> SubscriptionPolicies:
        subscription = self._resources.subscription(name)
        policies.validate()
        subscription.config = replace(subscription.config, policies=policies)
        self._store.resources.put_subscription(subscription.record())
        self._resources.apply_policies(subscription)
        return subscription.config.policies

    def policy_counters(self, name: str) -> SubscriptionPolicyCounters:
        now = self._clock.now()
        delivery = self._resources.subscription(name).delivery
        delivery.advance(now)
        counters = delivery.counters
        return SubscriptionPolicyCounters(
            skipped=counters.skipped,
            evicted=counters.evicted,
            expired_by_ttl=counters.expired_by_ttl,
            delayed_pending=delivery.reads.delayed_pending(now),
            backlog_messages=delivery.reads.backlog(),
            backlog_bytes=delivery.reads.backlog_bytes(),
            oldest_unacked_publish_time=delivery.reads.oldest_unacked(),
        )
