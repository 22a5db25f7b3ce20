"""Pulsar-style broker policies as frozen dataclasses: what ``AdminClient``'s policy
methods take and return (eoclient's reference server only; docs/policies.md).

The conventions of :mod:`eoclient.admin.types`: durations are
:class:`datetime.timedelta`, instants timezone-aware UTC :class:`datetime.datetime`,
``None`` "not set". Here ``None`` in a limit also means "no limit": a retention time of
``None`` is Pulsar's ``-1`` (infinite). The rules (which combinations are valid, what
each action does) are the server's, which refuses a bad value with INVALID_ARGUMENT
naming it; :mod:`eoclient.admin.policy_calls` is the only place these meet the wire.
"""

from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass

__all__ = [
    "BacklogQuota",
    "BacklogQuotaAction",
    "RetentionPolicy",
    "SeekOutcome",
    "SkipOutcome",
    "SubscriptionPolicies",
    "SubscriptionPolicyCounters",
    "TopicPolicies",
    "TopicPolicyCounters",
]

# PRODUCER_REQUEST_HOLD's wait when the quota does not say (Pulsar's sendTimeoutMs).
DEFAULT_HOLD_TIMEOUT = datetime.timedelta(seconds=30)


class SkipOutcome(enum.Enum):
    """What skipping one message id did on a subscription (``AdminClient.skip_messages``)."""

    SKIPPED = "skipped"
    """It was waiting, leased or delayed there: now acknowledged, never delivered again
    there; its outstanding ack ids are invalid."""
    ALREADY_ACKNOWLEDGED = "already_acknowledged"
    """A message of the subscription's topic not pending there: acknowledged (by a
    subscriber, a skip or a policy), expired, dead-lettered or filtered out. Nothing
    changed."""
    NOT_FOUND = "not_found"
    """Not a message of the subscription's topic: an id the server never issued, or one
    of a message published to another topic."""


class BacklogQuotaAction(enum.Enum):
    """What Publish does when a subscription's backlog is over the quota (Pulsar's names)."""

    PRODUCER_REQUEST_HOLD = "producer_request_hold"
    """Publish waits (at most ``hold_timeout``) for the backlog to shrink, then fails with
    RESOURCE_EXHAUSTED (``ResourceExhausted``, which publishers retry)."""
    PRODUCER_EXCEPTION = "producer_exception"
    """Publish fails at once with RESOURCE_EXHAUSTED naming the quota."""
    CONSUMER_BACKLOG_EVICTION = "consumer_backlog_eviction"
    """The oldest unacknowledged messages of each subscription over the quota are
    acknowledged by the broker (counted as ``evicted``; their ack ids become invalid)."""


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long and how much a topic keeps of what it published, acknowledged or not, for
    seek to a time (Pulsar retention; docs/protocol.md#topic-retention-policy).

    Attributes:
        time: how long after publish; ``None`` = no time limit (Pulsar's ``-1``).
        size_bytes: how many bytes, oldest dropped first; ``None`` = no size limit.

    Both ``None`` is infinite retention. A zero limit together with a non-zero one is
    refused by the server (Pulsar's table); no retention at all is
    ``AdminClient.remove_topic_retention``.
    """

    time: datetime.timedelta | None
    size_bytes: int | None


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """A limit on each subscription's unacknowledged backlog (docs/protocol.md#backlog-quotas).

    Attributes:
        limit_bytes: unacknowledged bytes per subscription; ``None`` = no size limit.
        limit_age: age of the oldest unacknowledged message; ``None`` = no age limit.
        action: what Publish does when a subscription is over a limit.
        hold_timeout: ``PRODUCER_REQUEST_HOLD``'s longest wait (0 .. 600 s).

    At least one limit is required.
    """

    limit_bytes: int | None = None
    limit_age: datetime.timedelta | None = None
    action: BacklogQuotaAction = BacklogQuotaAction.PRODUCER_REQUEST_HOLD
    hold_timeout: datetime.timedelta = DEFAULT_HOLD_TIMEOUT


@dataclass(frozen=True, slots=True)
class TopicPolicies:
    """A topic's policies; ``None`` = that policy is not set.

    Attributes:
        topic: ``projects/{project}/topics/{topic}``.
        retention: what the topic keeps for replay (acknowledged messages included).
        backlog_quota: the limit on each subscription's unacknowledged backlog.
        message_ttl: unacknowledged messages older than this are acknowledged by the
            broker (each subscription's own TTL wins over this one).
    """

    topic: str
    retention: RetentionPolicy | None = None
    backlog_quota: BacklogQuota | None = None
    message_ttl: datetime.timedelta | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionPolicies:
    """A subscription's policies.

    Attributes:
        subscription: ``projects/{project}/subscriptions/{subscription}``.
        message_ttl: the subscription's own TTL; ``None`` = its topic's applies.
        effective_message_ttl: the TTL in effect (its own, else its topic's; ``None``:
            none).
    """

    subscription: str
    message_ttl: datetime.timedelta | None = None
    effective_message_ttl: datetime.timedelta | None = None


@dataclass(frozen=True, slots=True)
class TopicPolicyCounters:
    """What a topic's policies did since the server started, and what it retains now.

    Attributes:
        held_publishes: publishes that waited on a ``PRODUCER_REQUEST_HOLD`` quota.
        held_then_refused: of those, refused when the hold timed out.
        refused_publishes: publishes refused at once by a ``PRODUCER_EXCEPTION`` quota.
        retained_messages / retained_bytes: what the retention policy keeps now.
        oldest_retained_publish_time: ``None`` when it keeps nothing.
    """

    topic: str
    held_publishes: int = 0
    held_then_refused: int = 0
    refused_publishes: int = 0
    retained_messages: int = 0
    retained_bytes: int = 0
    oldest_retained_publish_time: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class SubscriptionPolicyCounters:
    """What the policies did on a subscription since the server started, and its backlog.

    Attributes:
        skipped: messages acknowledged by ``skip_messages``.
        evicted: messages acknowledged by a ``CONSUMER_BACKLOG_EVICTION`` quota.
        expired_by_ttl: messages acknowledged by a message TTL.
        delayed_pending: messages held back by a delayed-delivery attribute now.
        backlog_messages / backlog_bytes: unacknowledged now.
        oldest_unacked_publish_time: ``None`` when the backlog is empty.
    """

    subscription: str
    skipped: int = 0
    evicted: int = 0
    expired_by_ttl: int = 0
    delayed_pending: int = 0
    backlog_messages: int = 0
    backlog_bytes: int = 0
    oldest_unacked_publish_time: datetime.datetime | None = None


@dataclass(frozen=True, slots=True)
class SeekOutcome:
    """How far back a seek reached (``AdminClient.seek_with_outcome``).

    Attributes:
        replayable_from: the publish time of the oldest message the seek could replay;
            ``None`` when nothing is retained, or for a seek to a snapshot.
        complete: ``False`` when the time asked for is older than anything retained:
            the replay starts at ``replayable_from`` instead.
    """

    replayable_from: datetime.datetime | None
    complete: bool
