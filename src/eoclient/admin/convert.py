"""Topics, subscriptions and snapshots <-> google.pubsub.v1 protobuf, field by field
(docs/protocol.md#subscription-properties-and-defaults): with ``requests``, their only
contact with the wire (schemas, IAM policies and broker policies convert in their own
modules).

The proto's "unset" rules are made explicit: an unset ``message_retention_duration`` is
``None``, an ``expiration_policy`` present without a ``ttl`` is
``ExpirationPolicy(ttl=None)`` (never expires), a ``push_config`` without an endpoint is a
pull subscription (``None``).
"""

from __future__ import annotations

import datetime

from google.protobuf import timestamp_pb2

from eoclient._proto import pubsub_pb2 as pb
from eoclient.admin import export_configs, ingestion
from eoclient.admin.schemas import settings_from_pb, settings_to_pb
from eoclient.admin.transforms import transforms_from_pb, transforms_to_pb
from eoclient.admin.types import (
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

# ================================================================ scalars


def utc_datetime(value: datetime.datetime, what: str) -> datetime.datetime:
    """``value`` in UTC; naive datetimes are refused (local or UTC? we will not guess)."""
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{what} must be a timezone-aware datetime, e.g. "
            f"datetime.now(timezone.utc); got the naive {value!r}"
        )
    return value.astimezone(datetime.UTC)


def set_timestamp(target: timestamp_pb2.Timestamp, value: datetime.datetime, what: str) -> None:
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


def push_config_to_pb(config: PushConfig, message: pb.PushConfig) -> None:
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
        push_config_to_pb(subscription.push_config, message.push_config)
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
