"""Topics, subscriptions and snapshots <-> google.pubsub.v1 protobuf: their only contact
with the wire (schemas, IAM policies and broker policies convert in their own modules).

Two kinds of function:

* resource converters (``topic_to_pb`` / ``topic_from_pb`` and friends), field by field
  (docs/protocol.md#subscription-properties-and-defaults), with the proto's "unset" rules
  made explicit: an unset ``message_retention_duration`` is ``None``, an
  ``expiration_policy`` present without a ``ttl`` is ``ExpirationPolicy(ttl=None)`` (never
  expires), a ``push_config`` without an endpoint is a pull subscription (``None``);
* request builders, one per RPC, returning a :class:`Request` that carries everything
  :meth:`PubSubTransport.call` needs (service, method, message, response class, routing
  header), so that the topic, subscription and snapshot methods never build or read a
  protobuf.

Update requests carry a field mask of top-level, snake_case paths (gRPC ``FieldMask``;
only the REST/JSON mapping uses camelCase: docs/protocol.md#update-masks): the fields
the caller passed, those not ``UNSET``. A path in the mask whose field is unset in the
message clears the field: that is how ``None`` is sent.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Collection, Mapping
from typing import Any

from google.protobuf import empty_pb2, timestamp_pb2

from eoclient._proto import pubsub_pb2 as pb
from eoclient.admin import export_configs, ingestion
from eoclient.admin.calls import Request
from eoclient.admin.schemas import settings_from_pb, settings_to_pb
from eoclient.admin.transforms import transforms_from_pb, transforms_to_pb
from eoclient.admin.types import (
    UNSET,
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    Snapshot,
    Subscription,
    SubscriptionState,
    Topic,
    TopicState,
)

# Output-only fields: never sent, whatever the dataclass holds.
_TOPIC_OUTPUT_ONLY = frozenset({"state"})
_SUBSCRIPTION_OUTPUT_ONLY = frozenset({"state", "topic_message_retention_duration"})


# ================================================================ scalars


def utc_datetime(value: datetime.datetime, what: str) -> datetime.datetime:
    """``value`` in UTC; naive datetimes are refused (local or UTC? we will not guess)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{what} must be a timezone-aware datetime, e.g. "
            f"datetime.now(timezone.utc); got the naive {value!r}"
        )
    return value.astimezone(datetime.UTC)


def _set_timestamp(target: timestamp_pb2.Timestamp, value: datetime.datetime, what: str) -> None:
    # Set in place: eoclient's messages use the Timestamp class of their private pool
    # (eoclient._proto._pool), so a google.protobuf.timestamp_pb2.Timestamp cannot be
    # copied in.
    target.FromDatetime(utc_datetime(value, what))


def _datetime(stamp: timestamp_pb2.Timestamp) -> datetime.datetime:
    return stamp.ToDatetime(tzinfo=datetime.UTC)


def _topic_state(value: int) -> TopicState:
    try:
        return TopicState(value)
    except ValueError:  # a state newer than our proto
        return TopicState.STATE_UNSPECIFIED


def _subscription_state(value: int) -> SubscriptionState:
    try:
        return SubscriptionState(value)
    except ValueError:
        return SubscriptionState.STATE_UNSPECIFIED


# ================================================================ topics


def topic_to_pb(topic: Topic) -> pb.Topic:
    message = pb.Topic(name=topic.name, labels=topic.labels, kms_key_name=topic.kms_key_name)
    if topic.message_retention_duration is not None:
        message.message_retention_duration.FromTimedelta(topic.message_retention_duration)
    if topic.schema_settings is not None:
        settings_to_pb(topic.schema_settings, message.schema_settings)
    transforms_to_pb(topic.message_transforms, message.message_transforms)
    if topic.ingestion_data_source_settings is not None:
        ingestion.settings_to_pb(
            topic.ingestion_data_source_settings, message.ingestion_data_source_settings
        )
    return message


def topic_from_pb(message: pb.Topic) -> Topic:
    return Topic(
        name=message.name,
        labels=dict(message.labels),
        message_retention_duration=(
            message.message_retention_duration.ToTimedelta()
            if message.HasField("message_retention_duration")
            else None
        ),
        kms_key_name=message.kms_key_name,
        schema_settings=(
            settings_from_pb(message.schema_settings)
            if message.HasField("schema_settings")
            else None
        ),
        message_transforms=transforms_from_pb(message.message_transforms),
        ingestion_data_source_settings=ingestion.settings_from_pb(
            message.ingestion_data_source_settings
        ),
        state=_topic_state(message.state),
    )


# ================================================================ subscriptions


def _push_config_to_pb(config: PushConfig, message: pb.PushConfig) -> None:
    message.push_endpoint = config.endpoint
    message.attributes.update(config.attributes)
    if config.service_account_email or config.audience:
        message.oidc_token.service_account_email = config.service_account_email
        message.oidc_token.audience = config.audience
    if config.no_wrapper:
        message.no_wrapper.write_metadata = config.write_metadata


def _push_config_from_pb(message: pb.PushConfig) -> PushConfig:
    return PushConfig(
        endpoint=message.push_endpoint,
        attributes=dict(message.attributes),
        service_account_email=message.oidc_token.service_account_email,
        audience=message.oidc_token.audience,
        no_wrapper=message.HasField("no_wrapper"),
        write_metadata=message.no_wrapper.write_metadata,
    )


def subscription_to_pb(subscription: Subscription) -> pb.Subscription:
    message = pb.Subscription(
        name=subscription.name,
        topic=subscription.topic,
        ack_deadline_seconds=subscription.ack_deadline_seconds,
        retain_acked_messages=subscription.retain_acked_messages,
        labels=subscription.labels,
        enable_message_ordering=subscription.enable_message_ordering,
        filter=subscription.filter,
        detached=subscription.detached,
        enable_exactly_once_delivery=subscription.enable_exactly_once_delivery,
    )
    if subscription.message_retention_duration is not None:
        message.message_retention_duration.FromTimedelta(subscription.message_retention_duration)
    if subscription.expiration_policy is not None:
        # Present but empty = never expires (proto comment on ExpirationPolicy.ttl).
        message.expiration_policy.SetInParent()
        if subscription.expiration_policy.ttl is not None:
            message.expiration_policy.ttl.FromTimedelta(subscription.expiration_policy.ttl)
    if subscription.dead_letter_policy is not None:
        policy = subscription.dead_letter_policy
        message.dead_letter_policy.dead_letter_topic = policy.dead_letter_topic
        message.dead_letter_policy.max_delivery_attempts = policy.max_delivery_attempts
    if subscription.retry_policy is not None:
        retry = subscription.retry_policy
        message.retry_policy.minimum_backoff.FromTimedelta(retry.minimum_backoff)
        message.retry_policy.maximum_backoff.FromTimedelta(retry.maximum_backoff)
    if subscription.push_config is not None:
        _push_config_to_pb(subscription.push_config, message.push_config)
    if subscription.bigquery_config is not None:
        export_configs.bigquery_to_pb(subscription.bigquery_config, message.bigquery_config)
    if subscription.cloud_storage_config is not None:
        export_configs.cloud_storage_to_pb(
            subscription.cloud_storage_config, message.cloud_storage_config
        )
    transforms_to_pb(subscription.message_transforms, message.message_transforms)
    return message


def subscription_from_pb(message: pb.Subscription) -> Subscription:
    expiration = None
    if message.HasField("expiration_policy"):
        policy = message.expiration_policy
        expiration = ExpirationPolicy(policy.ttl.ToTimedelta() if policy.HasField("ttl") else None)
    dead_letter = None
    if message.HasField("dead_letter_policy"):
        dead_letter = DeadLetterPolicy(
            message.dead_letter_policy.dead_letter_topic,
            message.dead_letter_policy.max_delivery_attempts,
        )
    retry = None
    if message.HasField("retry_policy"):
        retry_pb = message.retry_policy
        default = RetryPolicy()  # unset backoffs read as the proto's defaults
        retry = RetryPolicy(
            retry_pb.minimum_backoff.ToTimedelta()
            if retry_pb.HasField("minimum_backoff")
            else default.minimum_backoff,
            retry_pb.maximum_backoff.ToTimedelta()
            if retry_pb.HasField("maximum_backoff")
            else default.maximum_backoff,
        )
    push = None
    if message.HasField("push_config") and message.push_config.push_endpoint:
        push = _push_config_from_pb(message.push_config)
    return Subscription(
        name=message.name,
        topic=message.topic,
        ack_deadline_seconds=message.ack_deadline_seconds,
        retain_acked_messages=message.retain_acked_messages,
        message_retention_duration=(
            message.message_retention_duration.ToTimedelta()
            if message.HasField("message_retention_duration")
            else None
        ),
        labels=dict(message.labels),
        enable_message_ordering=message.enable_message_ordering,
        expiration_policy=expiration,
        filter=message.filter,
        dead_letter_policy=dead_letter,
        retry_policy=retry,
        enable_exactly_once_delivery=message.enable_exactly_once_delivery,
        push_config=push,
        bigquery_config=(
            export_configs.bigquery_from_pb(message.bigquery_config)
            if message.HasField("bigquery_config") and message.bigquery_config.table
            else None
        ),
        cloud_storage_config=(
            export_configs.cloud_storage_from_pb(message.cloud_storage_config)
            if message.HasField("cloud_storage_config") and message.cloud_storage_config.bucket
            else None
        ),
        message_transforms=transforms_from_pb(message.message_transforms),
        detached=message.detached,
        topic_message_retention_duration=(
            message.topic_message_retention_duration.ToTimedelta()
            if message.HasField("topic_message_retention_duration")
            else None
        ),
        state=_subscription_state(message.state),
    )


# ================================================================ snapshots


def snapshot_from_pb(message: pb.Snapshot) -> Snapshot:
    return Snapshot(
        name=message.name,
        topic=message.topic,
        expire_time=_datetime(message.expire_time) if message.HasField("expire_time") else None,
        labels=dict(message.labels),
    )


# ================================================================ field masks


def _passed(changes: Mapping[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in changes.items() if value is not UNSET}


def _mask_paths(changes: Mapping[str, Any], known: Collection[str], what: str) -> list[str]:
    if not changes:
        raise ValueError(f"{what}: nothing to update; pass at least one field to change")
    unknown = sorted(set(changes) - set(known))
    if unknown:  # the client only passes known names; this guards the converters
        raise ValueError(f"{what}: unknown fields {unknown}")
    # Sorted, so a request's mask does not depend on the caller's argument order.
    return sorted(changes)


def _fields(cls: type[Any], exclude: Collection[str]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.name not in exclude)


TOPIC_UPDATABLE = _fields(Topic, {"name", *_TOPIC_OUTPUT_ONLY})
# enable_message_ordering and filter are immutable after creation
# (docs/protocol.md#subscription-properties-and-defaults);
# detached is changed by DetachSubscription only.
SUBSCRIPTION_UPDATABLE = _fields(
    Subscription,
    {"name", "topic", "enable_message_ordering", "filter", "detached", *_SUBSCRIPTION_OUTPUT_ONLY},
)
SNAPSHOT_UPDATABLE = frozenset({"labels", "expire_time"})


# ================================================================ requests: Publisher


def create_topic(topic: Topic) -> Request[pb.Topic]:
    return Request("Publisher", "CreateTopic", topic_to_pb(topic), pb.Topic, ("name", topic.name))


def get_topic(name: str) -> Request[pb.Topic]:
    return Request(
        "Publisher", "GetTopic", pb.GetTopicRequest(topic=name), pb.Topic, ("topic", name)
    )


def update_topic(name: str, changes: Mapping[str, Any]) -> Request[pb.Topic]:
    changes = _passed(changes)
    paths = _mask_paths(changes, TOPIC_UPDATABLE, "update_topic")
    topic = dataclasses.replace(Topic(name), **changes)
    request = pb.UpdateTopicRequest(topic=topic_to_pb(topic))
    request.update_mask.paths.extend(paths)
    return Request("Publisher", "UpdateTopic", request, pb.Topic, ("topic.name", name))


def list_topics(project: str, page_size: int, token: str) -> Request[pb.ListTopicsResponse]:
    request = pb.ListTopicsRequest(project=project, page_size=page_size, page_token=token)
    return Request("Publisher", "ListTopics", request, pb.ListTopicsResponse, ("project", project))


def topics_page(response: pb.ListTopicsResponse) -> tuple[list[Topic], str]:
    return [topic_from_pb(t) for t in response.topics], response.next_page_token


def delete_topic(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Publisher",
        "DeleteTopic",
        pb.DeleteTopicRequest(topic=name),
        empty_pb2.Empty,
        ("topic", name),
    )


def list_topic_subscriptions(
    topic: str, page_size: int, token: str
) -> Request[pb.ListTopicSubscriptionsResponse]:
    request = pb.ListTopicSubscriptionsRequest(topic=topic, page_size=page_size, page_token=token)
    return Request(
        "Publisher",
        "ListTopicSubscriptions",
        request,
        pb.ListTopicSubscriptionsResponse,
        ("topic", topic),
    )


def list_topic_snapshots(
    topic: str, page_size: int, token: str
) -> Request[pb.ListTopicSnapshotsResponse]:
    request = pb.ListTopicSnapshotsRequest(topic=topic, page_size=page_size, page_token=token)
    return Request(
        "Publisher", "ListTopicSnapshots", request, pb.ListTopicSnapshotsResponse, ("topic", topic)
    )


def names_page(
    response: pb.ListTopicSubscriptionsResponse | pb.ListTopicSnapshotsResponse,
) -> tuple[list[str], str]:
    if isinstance(response, pb.ListTopicSubscriptionsResponse):
        return list(response.subscriptions), response.next_page_token
    return list(response.snapshots), response.next_page_token


def detach_subscription(name: str) -> Request[pb.DetachSubscriptionResponse]:
    return Request(
        "Publisher",
        "DetachSubscription",
        pb.DetachSubscriptionRequest(subscription=name),
        pb.DetachSubscriptionResponse,
        ("subscription", name),
    )


# ================================================================ requests: Subscriber


def create_subscription(subscription: Subscription) -> Request[pb.Subscription]:
    return Request(
        "Subscriber",
        "CreateSubscription",
        subscription_to_pb(subscription),
        pb.Subscription,
        ("name", subscription.name),
    )


def get_subscription(name: str) -> Request[pb.Subscription]:
    return Request(
        "Subscriber",
        "GetSubscription",
        pb.GetSubscriptionRequest(subscription=name),
        pb.Subscription,
        ("subscription", name),
    )


def update_subscription(name: str, changes: Mapping[str, Any]) -> Request[pb.Subscription]:
    changes = _passed(changes)
    paths = _mask_paths(changes, SUBSCRIPTION_UPDATABLE, "update_subscription")
    subscription = dataclasses.replace(Subscription(name, ""), **changes)
    request = pb.UpdateSubscriptionRequest(subscription=subscription_to_pb(subscription))
    request.update_mask.paths.extend(paths)
    return Request(
        "Subscriber", "UpdateSubscription", request, pb.Subscription, ("subscription.name", name)
    )


def list_subscriptions(
    project: str, page_size: int, token: str
) -> Request[pb.ListSubscriptionsResponse]:
    request = pb.ListSubscriptionsRequest(project=project, page_size=page_size, page_token=token)
    return Request(
        "Subscriber",
        "ListSubscriptions",
        request,
        pb.ListSubscriptionsResponse,
        ("project", project),
    )


def subscriptions_page(response: pb.ListSubscriptionsResponse) -> tuple[list[Subscription], str]:
    return [subscription_from_pb(s) for s in response.subscriptions], response.next_page_token


def delete_subscription(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Subscriber",
        "DeleteSubscription",
        pb.DeleteSubscriptionRequest(subscription=name),
        empty_pb2.Empty,
        ("subscription", name),
    )


def create_snapshot(
    name: str, subscription: str, labels: Mapping[str, str]
) -> Request[pb.Snapshot]:
    request = pb.CreateSnapshotRequest(name=name, subscription=subscription, labels=labels)
    return Request("Subscriber", "CreateSnapshot", request, pb.Snapshot, ("name", name))


def get_snapshot(name: str) -> Request[pb.Snapshot]:
    return Request(
        "Subscriber",
        "GetSnapshot",
        pb.GetSnapshotRequest(snapshot=name),
        pb.Snapshot,
        ("snapshot", name),
    )


def update_snapshot(name: str, changes: Mapping[str, Any]) -> Request[pb.Snapshot]:
    changes = _passed(changes)
    paths = _mask_paths(changes, SNAPSHOT_UPDATABLE, "update_snapshot")
    snapshot = pb.Snapshot(name=name)
    if "labels" in changes:
        snapshot.labels.update(changes["labels"])
    if changes.get("expire_time") is not None:
        _set_timestamp(snapshot.expire_time, changes["expire_time"], "expire_time")
    request = pb.UpdateSnapshotRequest(snapshot=snapshot)
    request.update_mask.paths.extend(paths)
    return Request("Subscriber", "UpdateSnapshot", request, pb.Snapshot, ("snapshot.name", name))


def list_snapshots(project: str, page_size: int, token: str) -> Request[pb.ListSnapshotsResponse]:
    request = pb.ListSnapshotsRequest(project=project, page_size=page_size, page_token=token)
    return Request(
        "Subscriber", "ListSnapshots", request, pb.ListSnapshotsResponse, ("project", project)
    )


def snapshots_page(response: pb.ListSnapshotsResponse) -> tuple[list[Snapshot], str]:
    return [snapshot_from_pb(s) for s in response.snapshots], response.next_page_token


def delete_snapshot(name: str) -> Request[empty_pb2.Empty]:
    return Request(
        "Subscriber",
        "DeleteSnapshot",
        pb.DeleteSnapshotRequest(snapshot=name),
        empty_pb2.Empty,
        ("snapshot", name),
    )


def seek(
    subscription: str, *, time: datetime.datetime | None, snapshot: str | None
) -> Request[pb.SeekResponse]:
    """A SeekRequest; exactly one of ``time`` and ``snapshot`` (the proto's ``target`` oneof)."""
    if (time is None) == (snapshot is None):
        raise ValueError("seek: pass exactly one of time= and snapshot=")
    request = pb.SeekRequest(subscription=subscription)
    if time is not None:
        _set_timestamp(request.time, time, "seek time")
    else:
        assert snapshot is not None
        if not snapshot:
            raise ValueError("seek: snapshot= must be a snapshot's full name, not ''")
        request.snapshot = snapshot
    return Request("Subscriber", "Seek", request, pb.SeekResponse, ("subscription", subscription))


def modify_push_config(name: str, config: PushConfig | None) -> Request[empty_pb2.Empty]:
    request = pb.ModifyPushConfigRequest(subscription=name)
    if config is not None:
        _push_config_to_pb(config, request.push_config)
    return Request(
        "Subscriber", "ModifyPushConfig", request, empty_pb2.Empty, ("subscription", name)
    )
