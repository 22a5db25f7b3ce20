"""Domain types of the broker core.

Durations are float seconds and times are wall-clock seconds since the epoch (the
core's clock). ``extras`` fields hold, as opaque bytes, the parts of a resource the
core stores but does not interpret (push, BigQuery or Cloud Storage configs, schema
settings, ...), so that adapters can round-trip them unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from eoclient.server_stub.core.policies import SubscriptionPolicies, TopicPolicies

T = TypeVar("T")

# Defaults of the real service (docs/protocol.md#subscription-properties-and-defaults).
DEFAULT_ACK_DEADLINE = 10
DEFAULT_EXACTLY_ONCE_ACK_DEADLINE = 60  # exactly-once page: "60 seconds if not specified"
DEFAULT_SUBSCRIPTION_RETENTION = 7 * 24 * 3600.0
DEFAULT_EXPIRATION_TTL = 31 * 24 * 3600.0
DEFAULT_MAX_DELIVERY_ATTEMPTS = 5
DEFAULT_MINIMUM_BACKOFF = 10.0
DEFAULT_MAXIMUM_BACKOFF = 600.0
DELETED_TOPIC = "_deleted-topic_"
SNAPSHOT_LIFETIME = 7 * 24 * 3600.0  # from the oldest message a snapshot retains
SNAPSHOT_MIN_LIFETIME = 3600.0  # CreateSnapshot refuses one that would expire sooner


@dataclass(frozen=True)
class RetryPolicy:
    """Backoff before redelivering a nacked or expired message (min <= max, 0..600 s)."""

    minimum_backoff: float = DEFAULT_MINIMUM_BACKOFF
    maximum_backoff: float = DEFAULT_MAXIMUM_BACKOFF


@dataclass(frozen=True)
class DeadLetterPolicy:
    dead_letter_topic: str
    max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS


@dataclass(frozen=True)
class ExpirationPolicy:
    """``ttl=None`` means the subscription never expires."""

    ttl: float | None = DEFAULT_EXPIRATION_TTL


@dataclass(frozen=True)
class TopicConfig:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    message_retention_duration: float | None = None
    kms_key_name: str = ""
    extras: bytes = b""
    policies: TopicPolicies = field(default_factory=TopicPolicies)  # Pulsar-style extension


@dataclass(frozen=True)
class TopicView:
    config: TopicConfig


@dataclass(frozen=True)
class SubscriptionConfig:
    """What a client asks for at CreateSubscription (``None`` = not set, default applies)."""

    name: str
    topic: str
    ack_deadline_seconds: int = 0
    retain_acked_messages: bool = False
    message_retention_duration: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    enable_message_ordering: bool = False
    expiration_policy: ExpirationPolicy | None = None
    filter: str = ""
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_policy: RetryPolicy | None = None
    detached: bool = False
    enable_exactly_once_delivery: bool = False
    extras: bytes = b""
    policies: SubscriptionPolicies = field(default_factory=SubscriptionPolicies)  # extension
    # The retention cursor of a topic with a retention policy (core/policies.py):
    # never listed, pulled or counted as a subscription.
    internal: bool = False


@dataclass(frozen=True)
class SubscriptionView:
    """A subscription as GetSubscription reports it: defaults applied, outputs filled."""

    config: SubscriptionConfig
    state_active: bool = True
    topic_message_retention_duration: float | None = None


@dataclass(frozen=True)
class SnapshotView:
    """A snapshot as GetSnapshot reports it (``expire_time`` in seconds since the epoch)."""

    name: str
    topic: str
    expire_time: float
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NewMessage:
    data: bytes = b""
    attributes: Mapping[str, str] = field(default_factory=dict)
    ordering_key: str = ""


@dataclass(frozen=True, slots=True)
class StoredMessage:
    message_id: str
    data: bytes
    attributes: Mapping[str, str]
    ordering_key: str
    publish_time: float
    size: int  # bytes counted for flow control: data + attribute keys/values + ordering key
    deliver_at: float = 0.0  # delayed delivery: not before this time (0: no delay)


# Not frozen: one is made for every message delivered, and a frozen dataclass's
# constructor (``object.__setattr__`` for each field) costs three times a plain one's.
# Nothing changes a Delivery once made; a transform makes a new one.
@dataclass(slots=True)
class Delivery:
    ack_id: str
    message: StoredMessage
    delivery_attempt: int  # 0 unless the subscription has a dead-letter policy


@dataclass(frozen=True)
class AckReply:
    """Per-id outcome of an Acknowledge / ModifyAckDeadline on an exactly-once subscription.

    ``failures`` maps each failed ack id to its ErrorInfo metadata value
    (``PERMANENT_FAILURE_INVALID_ACK_ID``, ``TRANSIENT_FAILURE_UNORDERED_ACK_ID``, ...);
    every other id of the request was applied and is in ``confirmed``. On subscriptions
    without exactly-once delivery ``failures`` is always empty.
    """

    confirmed: tuple[str, ...]
    failures: Mapping[str, str]
    exactly_once: bool

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True)
class Page(Generic[T]):
    items: tuple[T, ...]
    next_page_token: str
