"""Topics: create, read, update (field masks), list, delete, and their Pulsar-style policies.

A topic's changes reach its subscriptions through the registry (``resources``): its
message_retention_duration and retention policy decide its retention cursor and the
retention of every subscription attached to it, its message TTL theirs unless they set
their own. A deleted topic's subscriptions stay, with ``_deleted-topic_`` as their topic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from eoclient._clock import Clock
from eoclient.errors import AlreadyExists
from eoclient.server_stub.core import labels, names, validation
from eoclient.server_stub.core.model import DELETED_TOPIC, Page, TopicConfig, TopicView
from eoclient.server_stub.core.policies import TopicPolicies, TopicPolicyCounters
from eoclient.server_stub.core.resources import Resources, TopicState, retention_cursor_name
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.core.update_mask import MaskRules, MergeExtras, apply_update_mask

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


class Topics:
    """The topic RPCs over the registry."""

    def __init__(
        self,
        clock: Clock,
        store: Store,
        resources: Resources,
        deleted: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._store = store
        self._resources = resources
        self._deleted = deleted  # a deleted resource's name (its IAM policy goes with it)

    def create(self, config: TopicConfig) -> TopicView:
        names.parse(config.name, "topics")
        labels.check(config.labels)
        if config.message_retention_duration is not None:
            validation.retention("message_retention_duration", config.message_retention_duration)
        if config.name in self._resources.topics:
            raise AlreadyExists("Topic already exists")
        topic = TopicState(config)
        self._resources.topics[config.name] = topic
        self._store.resources.put_topic(config)
        self._resources.sync_retention_cursor(topic)
        return TopicView(config)

    def get(self, name: str) -> TopicView:
        return TopicView(self._resources.topic(name).config)

    def update(
        self, config: TopicConfig, paths: Sequence[str], merge_extras: MergeExtras | None = None
    ) -> TopicView:
        """Apply the fields named by ``paths`` (snake_case field-mask paths) from ``config``.

        ``merge_extras(old, new, paths)`` lets the adapter update opaque fields
        (schema_settings, message_storage_policy, ...) it keeps in ``extras``.
        """
        topic = self._resources.topic(config.name)
        updated = apply_update_mask(topic.config, config, paths, TOPIC_MASK, merge_extras)
        labels.check(updated.labels)
        if updated.message_retention_duration is not None:
            validation.retention("message_retention_duration", updated.message_retention_duration)
        topic.config = updated
        self._store.resources.put_topic(updated)
        self._changed_policies(topic)
        return TopicView(topic.config)

    def list(self, project: str, page_size: int, page_token: str) -> Page[TopicView]:
        project_id = names.parse_project(project)
        prefix = f"projects/{project_id}/topics/"
        topics = self._resources.topics
        matching = sorted(n for n in topics if n.startswith(prefix))
        page, token = names.paginate(matching, page_size, page_token)
        return Page(tuple(TopicView(topics[n].config) for n in page), token)

    def list_subscriptions(self, topic: str, page_size: int, page_token: str) -> Page[str]:
        record = self._resources.topic(topic)
        listed = sorted(n for n in record.subscriptions if n != retention_cursor_name(topic))
        page, token = names.paginate(listed, page_size, page_token)
        return Page(tuple(page), token)

    def delete(self, name: str) -> None:
        resources = self._resources
        topic = resources.topic(name)
        cursor = retention_cursor_name(name)
        if cursor in resources.subscriptions:
            resources.remove_subscription(cursor)  # the topic's retention goes with it
        del resources.topics[name]
        self._store.resources.delete_topic(name)
        # Subscriptions outlive their topic; their topic field reads "_deleted-topic_"
        # (docs/protocol.md#subscription-properties-and-defaults) and their backlog stays
        # deliverable.
        for subscription_name in topic.subscriptions:
            subscription = resources.subscriptions[subscription_name]
            subscription.config = replace(subscription.config, topic=DELETED_TOPIC)
            self._store.resources.put_subscription(subscription.record())
            resources.apply_policies(subscription)  # the topic's retention no longer applies
        self._deleted(name)  # a new topic of this name starts without a policy

    # ================================================= Pulsar-style policies

    def policies(self, name: str) -> TopicPolicies:
        return self._resources.topic(name).config.policies

    def set_policies(self, name: str, policies: TopicPolicies) -> TopicPolicies:
        """Replace the topic's retention, backlog quota and message TTL (policies.py)."""
        topic = self._resources.topic(name)
        policies.validate()
        topic.config = replace(topic.config, policies=policies)
        self._store.resources.put_topic(topic.config)
        self._changed_policies(topic)
        return topic.config.policies

    def policy_counters(self, name: str) -> TopicPolicyCounters:
        state = self._resources.topic(name)
        cursor = self._resources.retention_cursor(name)
        retained = cursor.delivery if cursor is not None else None
        if retained is not None:
            retained.advance(self._clock.now())
        return TopicPolicyCounters(
            held_publishes=state.counters.held_publishes,
            held_then_refused=state.counters.held_then_refused,
            refused_publishes=state.counters.refused_publishes,
            retained_messages=retained.reads.backlog() if retained else 0,
            retained_bytes=retained.reads.backlog_bytes() if retained else 0,
            oldest_retained_publish_time=retained.reads.oldest_unacked() if retained else None,
        )

    def _changed_policies(self, topic: TopicState) -> None:
        """The topic's retention or TTL may have changed: its cursor and subscriptions follow."""
        self._resources.sync_retention_cursor(topic)
        for subscription_name in topic.subscriptions:
            self._resources.apply_policies(self._resources.subscriptions[subscription_name])
