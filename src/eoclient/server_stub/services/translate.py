"""Wire (google.pubsub.v1 protobuf) <-> broker-core domain types. Nothing else.

The core models the fields it enforces; everything else a client sends on a Topic or
Subscription (push, BigQuery, Cloud Storage and Bigtable configs, schema settings,
message transforms, ...) is kept as a serialized message in ``extras`` and merged
back on the way out, so resources round-trip unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import (
    DeadLetterPolicy,
    Delivery,
    ExpirationPolicy,
    NewMessage,
    RetryPolicy,
    SnapshotView,
    StoredMessage,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)
from eoclient.server_stub.core.model import DEFAULT_MAXIMUM_BACKOFF, DEFAULT_MINIMUM_BACKOFF

_TOPIC_MODELED = ("name", "labels", "message_retention_duration", "kms_key_name", "state")
_SUBSCRIPTION_MODELED = (
    "name",
    "topic",
    "ack_deadline_seconds",
    "retain_acked_messages",
    "message_retention_duration",
    "labels",
    "enable_message_ordering",
    "expiration_policy",
    "filter",
    "dead_letter_policy",
    "retry_policy",
    "detached",
    "enable_exactly_once_delivery",
    "topic_message_retention_duration",
    "state",
)


def seconds_of(duration: duration_pb2.Duration) -> float:
    return duration.seconds + duration.nanos / 1e9


# What proto3 JSON can render (google/protobuf/duration.proto, timestamp.proto): the
# core keeps float seconds, and a value at the edge of the range a request may carry
# (request_checks) can round past it on the way back; it is clamped, never rendered
# out of range.
MAX_DURATION_SECONDS = 315_576_000_000  # 10,000 years
MIN_TIMESTAMP_SECONDS = -62_135_596_800  # 0001-01-01T00:00:00Z
MAX_TIMESTAMP_SECONDS = 253_402_300_799  # 9999-12-31T23:59:59Z
_NANOS = 1_000_000_000


def _set_duration(target: duration_pb2.Duration, seconds: float) -> None:
    sign = -1 if seconds < 0 else 1  # seconds and nanos share the sign of the duration
    whole = int(abs(seconds))
    nanos = round((abs(seconds) - whole) * _NANOS)
    if nanos >= _NANOS:  # 0.9999999996 rounds up to the next second
        whole, nanos = whole + 1, nanos - _NANOS
    if whole > MAX_DURATION_SECONDS:
        whole, nanos = MAX_DURATION_SECONDS, _NANOS - 1
    target.seconds = sign * whole
    target.nanos = sign * nanos


def _extras(message: Message, modeled: Sequence[str]) -> bytes:
    copy = type(message)()
    copy.CopyFrom(message)
    for name in modeled:
        copy.ClearField(name)
    return copy.SerializeToString(deterministic=True)


# ------------------------------------------------------------------ topics


def topic_from_pb(topic: pubsub_pb2.Topic) -> TopicConfig:
    return TopicConfig(
        name=topic.name,
        labels=dict(topic.labels),
        message_retention_duration=(
            seconds_of(topic.message_retention_duration)
            if topic.HasField("message_retention_duration")
            else None
        ),
        kms_key_name=topic.kms_key_name,
        extras=_extras(topic, _TOPIC_MODELED),
    )


def topic_to_pb(view: TopicView) -> pubsub_pb2.Topic:
    config = view.config
    topic = pubsub_pb2.Topic.FromString(config.extras)
    topic.name = config.name
    topic.labels.update(config.labels)
    if config.message_retention_duration is not None:
        _set_duration(topic.message_retention_duration, config.message_retention_duration)
    topic.kms_key_name = config.kms_key_name
    topic.state = pubsub_pb2.Topic.ACTIVE
    return topic


# ----------------------------------------------------------- subscriptions


def subscription_from_pb(sub: pubsub_pb2.Subscription) -> SubscriptionConfig:
    expiration = None
    if sub.HasField("expiration_policy"):
        policy = sub.expiration_policy
        # Set but without a ttl: the subscription never expires (proto comment).
        expiration = ExpirationPolicy(seconds_of(policy.ttl) if policy.HasField("ttl") else None)
    dead_letter = None
    if sub.HasField("dead_letter_policy"):
        dead_letter = DeadLetterPolicy(
            sub.dead_letter_policy.dead_letter_topic,
            sub.dead_letter_policy.max_delivery_attempts,
        )
    retry = None
    if sub.HasField("retry_policy"):
        policy_pb = sub.retry_policy
        retry = RetryPolicy(
            seconds_of(policy_pb.minimum_backoff)
            if policy_pb.HasField("minimum_backoff")
            else DEFAULT_MINIMUM_BACKOFF,
            seconds_of(policy_pb.maximum_backoff)
            if policy_pb.HasField("maximum_backoff")
            else DEFAULT_MAXIMUM_BACKOFF,
        )
    return SubscriptionConfig(
        name=sub.name,
        topic=sub.topic,
        ack_deadline_seconds=sub.ack_deadline_seconds,
        retain_acked_messages=sub.retain_acked_messages,
        message_retention_duration=(
            seconds_of(sub.message_retention_duration)
            if sub.HasField("message_retention_duration")
            else None
        ),
        labels=dict(sub.labels),
        enable_message_ordering=sub.enable_message_ordering,
        expiration_policy=expiration,
        filter=sub.filter,
        dead_letter_policy=dead_letter,
        retry_policy=retry,
        detached=sub.detached,
        enable_exactly_once_delivery=sub.enable_exactly_once_delivery,
        extras=_extras(sub, _SUBSCRIPTION_MODELED),
    )


def subscription_to_pb(view: SubscriptionView) -> pubsub_pb2.Subscription:
    config = view.config
    sub = pubsub_pb2.Subscription.FromString(config.extras)
    sub.name = config.name
    sub.topic = config.topic
    sub.ack_deadline_seconds = config.ack_deadline_seconds
    sub.retain_acked_messages = config.retain_acked_messages
    if config.message_retention_duration is not None:
        _set_duration(sub.message_retention_duration, config.message_retention_duration)
    sub.labels.update(config.labels)
    sub.enable_message_ordering = config.enable_message_ordering
    if config.expiration_policy is not None:
        sub.expiration_policy.SetInParent()
        if config.expiration_policy.ttl is not None:
            _set_duration(sub.expiration_policy.ttl, config.expiration_policy.ttl)
    sub.filter = config.filter
    if config.dead_letter_policy is not None:
        sub.dead_letter_policy.dead_letter_topic = config.dead_letter_policy.dead_letter_topic
        sub.dead_letter_policy.max_delivery_attempts = (
            config.dead_letter_policy.max_delivery_attempts
        )
    if config.retry_policy is not None:
        _set_duration(sub.retry_policy.minimum_backoff, config.retry_policy.minimum_backoff)
        _set_duration(sub.retry_policy.maximum_backoff, config.retry_policy.maximum_backoff)
    sub.detached = config.detached
    sub.enable_exactly_once_delivery = config.enable_exactly_once_delivery
    if view.topic_message_retention_duration is not None:
        _set_duration(sub.topic_message_retention_duration, view.topic_message_retention_duration)
    sub.state = (
        pubsub_pb2.Subscription.ACTIVE
        if view.state_active
        else pubsub_pb2.Subscription.RESOURCE_ERROR
    )
    return sub


def _copy_field(target: Message, source: Message, field: str) -> None:
    """``target.field`` becomes ``source.field``: unset there clears it here."""
    target.ClearField(field)
    descriptor = source.DESCRIPTOR.fields_by_name[field]
    if descriptor.is_repeated:  # message_transforms, maps
        value = getattr(source, field)
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            getattr(target, field).update(value)
        else:
            getattr(target, field).extend(value)
    elif descriptor.message_type is not None:
        if source.HasField(field):
            getattr(target, field).CopyFrom(getattr(source, field))
    elif not descriptor.has_presence or source.HasField(field):
        setattr(target, field, getattr(source, field))


def _merge_extras(
    message_type: type[Message], old: bytes, new: bytes, paths: Sequence[str]
) -> bytes:
    """Copy each masked field from ``new`` to ``old`` (both serialized).

    A dotted path changes one field inside a message and keeps its others: the mask
    ``schema_settings.first_revision_id`` replaces the revision and leaves the schema and
    encoding as stored (docs/protocol.md#update-masks). A path naming no field of the
    message is INVALID_ARGUMENT.
    """
    target = message_type.FromString(old)
    source = message_type.FromString(new)
    for path in paths:
        *parents, leaf = path.split(".")
        into, from_ = target, source
        for name in parents:
            descriptor = into.DESCRIPTOR.fields_by_name.get(name)
            if descriptor is None or descriptor.message_type is None or descriptor.is_repeated:
                raise _unknown_path(message_type, path)
            into, from_ = getattr(into, name), getattr(from_, name)
        if leaf not in into.DESCRIPTOR.fields_by_name:
            raise _unknown_path(message_type, path)
        _copy_field(into, from_, leaf)
    return target.SerializeToString(deterministic=True)


def _unknown_path(message_type: type[Message], path: str) -> InvalidArgument:
    kind = message_type.DESCRIPTOR.name
    return InvalidArgument(
        f"Invalid update_mask provided in the Update{kind}Request: "
        f"{path!r} is not a known {kind} field."
    )


def top_level_fields(paths: Sequence[str]) -> list[str]:
    """The top-level field names an update mask touches ("a.b" touches "a")."""
    return [path.split(".", 1)[0] for path in paths]


def merge_subscription_extras(old: bytes, new: bytes, paths: Sequence[str]) -> bytes:
    """UpdateSubscription of opaque fields: copy each masked top-level field from new to old."""
    return _merge_extras(pubsub_pb2.Subscription, old, new, paths)


def merge_topic_extras(old: bytes, new: bytes, paths: Sequence[str]) -> bytes:
    """UpdateTopic of opaque fields (schema_settings, message_storage_policy, ...)."""
    return _merge_extras(pubsub_pb2.Topic, old, new, paths)


# ---------------------------------------------------------------- snapshots


def seconds_of_timestamp(timestamp: timestamp_pb2.Timestamp) -> float:
    return timestamp.seconds + timestamp.nanos / 1e9


def _set_timestamp(target: timestamp_pb2.Timestamp, seconds: float) -> None:
    whole = math.floor(seconds)  # nanos are never negative, before the epoch too
    nanos = round((seconds - whole) * _NANOS)
    if nanos >= _NANOS:
        whole, nanos = whole + 1, nanos - _NANOS
    if whole > MAX_TIMESTAMP_SECONDS:
        whole, nanos = MAX_TIMESTAMP_SECONDS, _NANOS - 1
    elif whole < MIN_TIMESTAMP_SECONDS:
        whole, nanos = MIN_TIMESTAMP_SECONDS, 0
    target.seconds = whole
    target.nanos = nanos


def snapshot_to_pb(view: SnapshotView) -> pubsub_pb2.Snapshot:
    snapshot = pubsub_pb2.Snapshot(name=view.name, topic=view.topic, labels=view.labels)
    _set_timestamp(snapshot.expire_time, view.expire_time)
    return snapshot


def snapshot_from_pb(snapshot: pubsub_pb2.Snapshot) -> SnapshotView:
    return SnapshotView(
        name=snapshot.name,
        topic=snapshot.topic,
        expire_time=seconds_of_timestamp(snapshot.expire_time),
        labels=dict(snapshot.labels),
    )


# ------------------------------------------------------------------ messages


def new_messages(request: pubsub_pb2.PublishRequest) -> list[NewMessage]:
    return [
        NewMessage(data=m.data, attributes=dict(m.attributes), ordering_key=m.ordering_key)
        for m in request.messages
    ]


def message_to_pb(message: StoredMessage) -> pubsub_pb2.PubsubMessage:
    pb = pubsub_pb2.PubsubMessage(
        data=message.data,
        attributes=message.attributes,
        message_id=message.message_id,
        ordering_key=message.ordering_key,
    )
    whole = int(message.publish_time)
    pb.publish_time.seconds = whole
    pb.publish_time.nanos = int((message.publish_time - whole) * 1e9)
    return pb


def received_message(delivery: Delivery) -> pubsub_pb2.ReceivedMessage:
    return pubsub_pb2.ReceivedMessage(
        ack_id=delivery.ack_id,
        message=message_to_pb(delivery.message),
        delivery_attempt=delivery.delivery_attempt,
    )
