"""Broker policies borrowed from Apache Pulsar (docs/protocol.md#broker-policy-extension),
as values and rules.

* ``RetentionPolicy`` (docs/protocol.md#topic-retention-policy) — per topic: how long and
  how much of what the topic published stays available to seek back into, acknowledged or
  not. ``-1`` is infinite, ``0`` disabled; both limits are set together; the table of valid
  combinations is ``RetentionPolicy.validate``. A topic with a policy keeps its messages in
  a *retention cursor* — a subscription of its own that nobody pulls, whose backlog is cut
  by time (oldest first, like a subscription's retention) and by size (oldest first while
  the backlog is larger). Seeking a subscription of the topic to a time replays from it too,
  messages published before the subscription existed included. Pub/Sub's own fields combine
  with it by union: a message is replayable while the subscription keeps it
  (``retain_acked_messages`` for its ``message_retention_duration``) *or* the topic's policy
  does.
* ``BacklogQuota`` (docs/protocol.md#backlog-quotas) — per topic: a limit on each
  subscription's unacknowledged backlog by size and/or by the age of its oldest message, and
  what happens at Publish when a subscription is over it: hold the publish until space frees
  (then RESOURCE_EXHAUSTED after ``hold_timeout``), refuse it at once (RESOURCE_EXHAUSTED
  naming the quota), or evict the oldest unacknowledged messages of the subscriptions over
  the limit (auto-acknowledged, counted; their ack ids become invalid).
* Message TTL (docs/protocol.md#message-ttl) — per topic or subscription (the subscription's
  wins when both are set): an unacknowledged message older than the TTL is acknowledged by
  the broker, leased or not, and counted; its ack ids become invalid.
* Delayed delivery (docs/protocol.md#delayed-delivery) — per message, by attribute:
  ``eoclient-deliver-at`` (an RFC 3339 time) or ``eoclient-deliver-after`` (a duration in
  Protocol Buffers JSON form, ``"90s"``, ``"1.5s"``) holds a message back on every
  subscription until that time; the ordering key's later messages wait behind it; skipping
  it cancels it.
* Skip by message id (docs/protocol.md#skip-by-message-id, PIP-423) — a subscription
  acknowledges chosen messages as if a subscriber had; outcome per id in ``SkipOutcome``.
"""

from __future__ import annotations

import datetime
import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from eoclient.errors import InvalidArgument, ResourceExhausted

# Delayed delivery: the attributes a publisher sets, and the furthest a message may be
# held back (the longest message_retention_duration the service allows: it would be
# gone before it could be delivered).
DELIVER_AT_ATTRIBUTE = "eoclient-deliver-at"
DELIVER_AFTER_ATTRIBUTE = "eoclient-deliver-after"
MAX_DELAY = 31 * 24 * 3600.0
# A held Publish (backlog quota, HOLD) waits at most this long by default: Pulsar's
# producer sendTimeoutMs default (30 s).
DEFAULT_HOLD_TIMEOUT = 30.0


class QuotaAction(enum.Enum):
    """What a backlog quota does at Publish when a subscription is over it
    (docs/protocol.md#backlog-quotas)."""

    HOLD = "producer_request_hold"
    EXCEPTION = "producer_exception"
    EVICTION = "consumer_backlog_eviction"


@dataclass(frozen=True)
class RetentionPolicy:
    """Pulsar retention: ``time`` seconds and ``size`` bytes (-1 infinite, 0 disabled)."""

    time: float
    size: int

    def validate(self) -> None:
        """The table of docs/protocol.md#topic-retention-policy: both limits disabled, or both
        set (-1 or > 0)."""
        for name, value in (("time", self.time), ("size", self.size)):
            if value < -1 or not math.isfinite(value):
                raise InvalidArgument(
                    f"retention {name} must be -1 (infinite), 0 (disabled) or positive; got {value}"
                )
        if (self.time == 0) != (self.size == 0):
            raise InvalidArgument(
                f"retention time {self.time:g} s with size {self.size} bytes is invalid: set "
                "both limits (-1 for infinite), or neither (0 and 0 disables retention)"
            )

    @property
    def enabled(self) -> bool:
        return self.time != 0

    @property
    def time_limit(self) -> float:
        return math.inf if self.time == -1 else self.time

    @property
    def size_limit(self) -> float:
        return math.inf if self.size == -1 else self.size


@dataclass(frozen=True)
class BacklogQuota:
    """A limit on each subscription's unacknowledged backlog (None: no such limit)."""

    limit_bytes: int | None = None
    limit_age: float | None = None  # seconds since the oldest unacked message's publish
    action: QuotaAction = QuotaAction.HOLD
    hold_timeout: float = DEFAULT_HOLD_TIMEOUT  # HOLD: then RESOURCE_EXHAUSTED

    def validate(self) -> None:
        if self.limit_bytes is None and self.limit_age is None:
            raise InvalidArgument("a backlog quota needs a size limit, an age limit or both")
        if self.limit_bytes is not None and self.limit_bytes <= 0:
            raise InvalidArgument(f"backlog quota limit_bytes must be > 0; got {self.limit_bytes}")
        if self.limit_age is not None and not (0 < self.limit_age < math.inf):
            raise InvalidArgument(f"backlog quota limit_age must be > 0 s; got {self.limit_age}")
        if not 0 <= self.hold_timeout <= 600:
            raise InvalidArgument(
                f"backlog quota hold_timeout must be in 0..600 s; got {self.hold_timeout}"
            )


@dataclass(frozen=True)
class TopicPolicies:
    retention: RetentionPolicy | None = None
    backlog_quota: BacklogQuota | None = None
    message_ttl: float | None = None  # seconds; None: no TTL

    def validate(self) -> None:
        if self.retention is not None:
            self.retention.validate()
        if self.backlog_quota is not None:
            self.backlog_quota.validate()
        validate_ttl(self.message_ttl)


@dataclass(frozen=True)
class SubscriptionPolicies:
    message_ttl: float | None = None  # seconds; None: the topic's, if any

    def validate(self) -> None:
        validate_ttl(self.message_ttl)


def validate_ttl(ttl: float | None) -> None:
    if ttl is not None and not (0 < ttl < math.inf):
        raise InvalidArgument(f"message_ttl must be > 0 seconds (or unset); got {ttl}")


class SkipOutcome(enum.Enum):
    """What skipping one message id did on a subscription."""

    SKIPPED = "skipped"  # it was waiting, leased or delayed there: now acknowledged
    # A message of its topic not pending there: acknowledged (by a subscriber or a policy),
    # expired, dead-lettered, filtered out. Skipping it again changes nothing.
    ALREADY_ACKNOWLEDGED = "already_acknowledged"
    # Not a message of its topic: never issued by this server, or published to another
    # topic (seq_topics.py; an id from before the server's restart cannot be told apart
    # and reads ALREADY_ACKNOWLEDGED).
    NOT_FOUND = "not_found"


@dataclass(frozen=True)
class SeekOutcome:
    """Where a seek to a time could replay from (None: nothing retained at all)."""

    replayable_from: float | None
    complete: bool  # False: the time is older than anything retained (says so)


# "90s", "1.5s", "-3s" is refused: the protobuf JSON form of a Duration.
_DURATION = re.compile(r"(?P<seconds>\d+(?:\.\d{1,9})?)s")


def deliver_at(attributes: Mapping[str, str], publish_time: float) -> float:
    """When a message may first be delivered: its delay attribute's time, or 0.0.

    Raises InvalidArgument naming the attribute for a malformed value, both attributes
    at once, or a delay beyond ``MAX_DELAY``.
    """
    at = attributes.get(DELIVER_AT_ATTRIBUTE)
    after = attributes.get(DELIVER_AFTER_ATTRIBUTE)
    if at is None and after is None:
        return 0.0
    if at is not None and after is not None:
        raise InvalidArgument(f"Set {DELIVER_AT_ATTRIBUTE} or {DELIVER_AFTER_ATTRIBUTE}, not both.")
    if after is not None:
        found = _DURATION.fullmatch(after)
        if found is None:
            raise InvalidArgument(
                f"The attribute {DELIVER_AFTER_ATTRIBUTE}={after!r} is not a duration such "
                'as "90s" or "1.5s".'
            )
        when = publish_time + float(found["seconds"])
        name, value = DELIVER_AFTER_ATTRIBUTE, after
    else:
        assert at is not None
        try:
            moment = datetime.datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is None or moment.tzinfo is None:
            raise InvalidArgument(
                f"The attribute {DELIVER_AT_ATTRIBUTE}={at!r} is not an RFC 3339 time with "
                'a zone, such as "2026-11-23T18:00:00Z".'
            ) from None
        when = moment.timestamp()
        name, value = DELIVER_AT_ATTRIBUTE, at
    if when - publish_time > MAX_DELAY:
        raise InvalidArgument(
            f"The attribute {name}={value!r} holds the message back more than 31 days, "
            "past any retention: it could never be delivered."
        )
    return when if when > publish_time else 0.0


class BacklogQuotaHeld(ResourceExhausted):
    """A Publish met a backlog quota whose action is HOLD: the door waits (at most
    ``hold_timeout`` seconds) for the backlog to shrink and tries again; if it does not,
    the caller gets RESOURCE_EXHAUSTED with this text."""

    def __init__(self, message: str, hold_timeout: float) -> None:
        super().__init__(message)
        self.hold_timeout = hold_timeout


@dataclass(frozen=True)
class SubscriptionPolicyCounters:
    """What the policies did on one subscription (since the server started) and its
    backlog now."""

    skipped: int
    evicted: int
    expired_by_ttl: int
    delayed_pending: int  # held back by a delayed-delivery attribute (in the window)
    backlog_messages: int
    backlog_bytes: int
    oldest_unacked_publish_time: float | None


@dataclass(frozen=True)
class TopicPolicyCounters:
    """What the policies did on one topic (since the server started) and what its
    retention policy keeps now."""

    held_publishes: int  # publishes that waited on a HOLD quota
    held_then_refused: int  # of those, refused when the hold timed out
    refused_publishes: int  # refused at once by an EXCEPTION quota
    retained_messages: int
    retained_bytes: int
    oldest_retained_publish_time: float | None
