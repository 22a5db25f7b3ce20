"""Admin resources as frozen dataclasses: what ``AdminClient`` takes and returns.

No protobuf here (docs/architecture.md#generated-protobuf-code-is-isolated);
:mod:`eoclient.admin.convert` (with :mod:`eoclient.admin.rpc_requests`) is the only
place these meet the wire types. Conventions, the same in every class:

* **durations** are :class:`datetime.timedelta` (wire: ``google.protobuf.Duration``);
* **instants** are timezone-aware :class:`datetime.datetime` in UTC (wire:
  ``google.protobuf.Timestamp``);
* **labels** are read-only mappings (any mapping passed in is copied), compared by
  value, left out of ``hash()``;
* ``None`` means "not set on the wire", and each field says what the server does then.

Field meanings and bounds follow google.pubsub.v1
(docs/protocol.md#subscription-properties-and-defaults).
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from eoclient.admin.export_configs import BigQueryConfig, CloudStorageConfig
from eoclient.admin.ingestion import IngestionSettings
from eoclient.admin.schemas import SchemaSettings
from eoclient.admin.transforms import MessageTransform

__all__ = [
    "UNSET",
    "DeadLetterPolicy",
    "ExpirationPolicy",
    "PushConfig",
    "RetryPolicy",
    "Snapshot",
    "Subscription",
    "SubscriptionState",
    "Topic",
    "TopicState",
    "Unset",
]


class Unset(enum.Enum):
    """Type of :data:`UNSET`: "leave this field as it is" in ``update_*`` calls."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""Default of every ``update_*`` argument: the field is not in the update mask."""


def _labels(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


def _no_labels() -> Mapping[str, str]:
    return MappingProxyType({})


class TopicState(enum.Enum):
    """``Topic.State`` (output only). The emulator reports ``STATE_UNSPECIFIED``."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    INGESTION_RESOURCE_ERROR = 2


class SubscriptionState(enum.Enum):
    """``Subscription.State`` (output only). The emulator reports ``STATE_UNSPECIFIED``."""

    STATE_UNSPECIFIED = 0
    ACTIVE = 1
    RESOURCE_ERROR = 2


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic (``google.pubsub.v1.Topic``).

    Attributes:
        name: ``projects/{project}/topics/{topic}``.
        labels: key/value labels.
        message_retention_duration: how long the topic keeps published messages
            (10 minutes .. 31 days); ``None`` = the topic keeps none, retention is
            governed by each subscription.
        kms_key_name: Cloud KMS key protecting messages; ``""`` = Google-managed.
        schema_settings: the schema published messages must match (``None``: none).
        message_transforms: UDFs applied, in order, to each message published, before
            it is stored (any sequence passed in is kept as a tuple).
        ingestion_data_source_settings: the outside source an import topic publishes
            from (``None``: a plain topic); see :mod:`eoclient.admin.ingestion`.
        state: output only (``INGESTION_RESOURCE_ERROR``: the source's own state says why
            it is not read).
    """

    name: str
    labels: Mapping[str, str] = field(default_factory=_no_labels, hash=False)
    message_retention_duration: datetime.timedelta | None = None
    kms_key_name: str = ""
    schema_settings: SchemaSettings | None = None
    message_transforms: tuple[MessageTransform, ...] = ()
    ingestion_data_source_settings: IngestionSettings | None = None
    state: TopicState = TopicState.STATE_UNSPECIFIED

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _labels(self.labels))
        object.__setattr__(self, "message_transforms", tuple(self.message_transforms))


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    """Where messages go after too many delivery attempts (``DeadLetterPolicy``).

    Attributes:
        dead_letter_topic: full name of an existing topic (else NOT_FOUND).
        max_delivery_attempts: 5..100; attempts = first delivery + nacks + expired
            deadlines.
    """

    dead_letter_topic: str
    max_delivery_attempts: int = 5


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential redelivery backoff after a nack or an expired deadline (``RetryPolicy``).

    Attributes:
        minimum_backoff: 0..600 s; the wire default when unset is 10 s.
        maximum_backoff: 0..600 s and >= ``minimum_backoff``; wire default 600 s.
    """

    minimum_backoff: datetime.timedelta = datetime.timedelta(seconds=10)
    maximum_backoff: datetime.timedelta = datetime.timedelta(seconds=600)


@dataclass(frozen=True, slots=True)
class ExpirationPolicy:
    """When an idle subscription is deleted (``ExpirationPolicy``).

    Attributes:
        ttl: idle time before deletion, >= 1 day (the emulator accepts less);
            ``None`` = the subscription never expires.
    """

    ttl: datetime.timedelta | None = None


@dataclass(frozen=True, slots=True)
class PushConfig:
    """Push delivery (``PushConfig``); a subscription without one is a pull subscription.

    Attributes:
        endpoint: URL messages are POSTed to.
        attributes: endpoint attributes (e.g. ``x-goog-version``).
        service_account_email / audience: OIDC token settings; both ``""`` = no token.
        no_wrapper: deliver the payload as the HTTP body (``NoWrapper``) instead of the
            JSON ``PubsubMessage`` wrapper.
        write_metadata: with ``no_wrapper``, send the message's metadata as headers.
    """

    endpoint: str
    attributes: Mapping[str, str] = field(default_factory=_no_labels, hash=False)
    service_account_email: str = ""
    audience: str = ""
    no_wrapper: bool = False
    write_metadata: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", _labels(self.attributes))


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscription (``google.pubsub.v1.Subscription``).

    Attributes:
        name: ``projects/{project}/subscriptions/{subscription}``.
        topic: the topic's full name; ``"_deleted-topic_"`` once the topic is deleted.
        ack_deadline_seconds: 10..600; ``0`` = the server's default (10 s, or 60 s
            with exactly-once delivery on the real service).
        retain_acked_messages: keep acked messages for seek-to-time replay.
        message_retention_duration: 10 minutes .. 31 days (the emulator: .. 7 days);
            ``None`` = the default, 7 days.
        labels: key/value labels.
        enable_message_ordering: deliver messages of one ordering key in order;
            immutable after creation.
        expiration_policy: ``None`` = the default (31 days idle);
            ``ExpirationPolicy(ttl=None)`` = never expires.
        filter: attribute filter (≤ 256 bytes); ``""`` = everything; immutable after
            creation.
        dead_letter_policy: ``None`` = no dead-lettering.
        retry_policy: ``None`` = redeliver as soon as possible.
        enable_exactly_once_delivery: exactly-once delivery.
        push_config: ``None`` = a pull subscription.
        bigquery_config: rows of a BigQuery table (``None``: no BigQuery export).
        cloud_storage_config: objects in a Cloud Storage bucket (``None``: no Cloud Storage
            export); at most one of push_config, bigquery_config, cloud_storage_config.
        message_transforms: UDFs applied, in order, to each message the subscription
            delivers (any sequence passed in is kept as a tuple).
        detached: output only in practice; set by ``AdminClient.detach_subscription``.
        topic_message_retention_duration: output only, the topic's retention.
        state: output only.
    """

    name: str
    topic: str
    ack_deadline_seconds: int = 0
    retain_acked_messages: bool = False
    message_retention_duration: datetime.timedelta | None = None
    labels: Mapping[str, str] = field(default_factory=_no_labels, hash=False)
    enable_message_ordering: bool = False
    expiration_policy: ExpirationPolicy | None = None
    filter: str = ""
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_policy: RetryPolicy | None = None
    enable_exactly_once_delivery: bool = False
    push_config: PushConfig | None = None
    bigquery_config: BigQueryConfig | None = None
    cloud_storage_config: CloudStorageConfig | None = None
    message_transforms: tuple[MessageTransform, ...] = ()
    detached: bool = False
    topic_message_retention_duration: datetime.timedelta | None = None
    state: SubscriptionState = SubscriptionState.STATE_UNSPECIFIED

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _labels(self.labels))
        object.__setattr__(self, "message_transforms", tuple(self.message_transforms))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A snapshot of a subscription's acknowledgment state (``google.pubsub.v1.Snapshot``).

    Attributes:
        name: ``projects/{project}/snapshots/{snapshot}``.
        topic: the topic of the subscription it was taken from.
        expire_time: when the service deletes it (at most 7 days after creation);
            ``None`` if the server did not say.
        labels: key/value labels.
    """

    name: str
    topic: str = ""
    expire_time: datetime.datetime | None = None
    labels: Mapping[str, str] = field(default_factory=_no_labels, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", _labels(self.labels))
