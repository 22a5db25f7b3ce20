"""``AdminClient``'s Pulsar-style policy methods: skip by message id, topic retention,
backlog quotas, message TTL, their counters, and seek with its outcome.

They call ``eoclient.broker.v1.BrokerPolicies``, an extension service of eoclient's
reference server (``eoclient serve``; docs/policies.md). Google's emulator and the real
service do not have it: there every method raises ``Unimplemented`` saying so. The
dataclasses are in :mod:`eoclient.admin.policies`; this module is the only place they
meet the wire. Errors are the server's, as ``RpcError`` subclasses (``InvalidArgument``
names the rule a value breaks, ``NotFound`` a missing topic or subscription).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterable
from typing import TypeVar

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from eoclient._proto import broker_policies_pb2 as pb
from eoclient._retrying import DEFAULT
from eoclient.admin.calls import AdminCalls, Request, Retry, Timeout
from eoclient.admin.convert import utc_datetime
from eoclient.admin.policies import (
    DEFAULT_HOLD_TIMEOUT,
    BacklogQuota,
    BacklogQuotaAction,
    RetentionPolicy,
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.errors import Unimplemented

SERVICE = "eoclient.broker.v1.BrokerPolicies"
# Pulsar's -1: no limit (RetentionPolicy's None).
_INFINITE = -1

ResponseT = TypeVar("ResponseT", bound=Message)

_ACTION_TO_PB = {
    BacklogQuotaAction.PRODUCER_REQUEST_HOLD: pb.BacklogQuota.PRODUCER_REQUEST_HOLD,
    BacklogQuotaAction.PRODUCER_EXCEPTION: pb.BacklogQuota.PRODUCER_EXCEPTION,
    BacklogQuotaAction.CONSUMER_BACKLOG_EVICTION: pb.BacklogQuota.CONSUMER_BACKLOG_EVICTION,
}
_ACTION_FROM_PB = {value: key for key, value in _ACTION_TO_PB.items()}
_OUTCOME_FROM_PB = {
    pb.SkippedMessage.SKIPPED: SkipOutcome.SKIPPED,
    pb.SkippedMessage.ALREADY_ACKNOWLEDGED: SkipOutcome.ALREADY_ACKNOWLEDGED,
    pb.SkippedMessage.NOT_FOUND: SkipOutcome.NOT_FOUND,
}


def extension_missing(error: Unimplemented) -> bool:
    """Whether ``error`` says the server lacks ``eoclient.broker.v1`` altogether (Google's
    emulator, the real service), rather than refusing one request."""
    return SERVICE in error.message


# ================================================================ conversions


def _set_duration(target: duration_pb2.Duration, value: datetime.timedelta, what: str) -> None:
    # Set in place: the messages use the Duration class of their private pool
    # (eoclient._proto._pool), into which google.protobuf's own cannot be copied.
    if not isinstance(value, datetime.timedelta):
        raise TypeError(f"{what} must be a datetime.timedelta, got {type(value).__name__}")
    target.FromTimedelta(value)


def _timedelta(message: Message, field: str) -> datetime.timedelta | None:
    if not message.HasField(field):
        return None
    duration: duration_pb2.Duration = getattr(message, field)
    return duration.ToTimedelta()


def _instant(message: Message, field: str) -> datetime.datetime | None:
    if not message.HasField(field):
        return None
    stamp = getattr(message, field)
    value: datetime.datetime = stamp.ToDatetime(tzinfo=datetime.UTC)
    return value


def retention_to_pb(retention: RetentionPolicy) -> pb.RetentionPolicy:
    """Pulsar's numbers: ``None`` is -1; a time is whole seconds (rounded up, so that a
    short limit never becomes 0, "disabled")."""
    message = pb.RetentionPolicy(time_seconds=_INFINITE, size_bytes=_INFINITE)
    if retention.time is not None:
        if not isinstance(retention.time, datetime.timedelta):
            raise TypeError(
                "RetentionPolicy.time must be a datetime.timedelta or None, "
                f"got {type(retention.time).__name__}"
            )
        if retention.time < datetime.timedelta(0):
            raise ValueError(
                f"RetentionPolicy.time must be >= 0 (None: no limit), got {retention.time!r}"
            )
        message.time_seconds = math.ceil(retention.time.total_seconds())
    if retention.size_bytes is not None:
        if isinstance(retention.size_bytes, bool) or not isinstance(retention.size_bytes, int):
            raise TypeError(
                f"RetentionPolicy.size_bytes must be an int or None, got {retention.size_bytes!r}"
            )
        if retention.size_bytes < 0:
            raise ValueError(
                "RetentionPolicy.size_bytes must be >= 0 (None: no limit), "
                f"got {retention.size_bytes}"
            )
        message.size_bytes = retention.size_bytes
    return message


def backlog_quota_to_pb(quota: BacklogQuota) -> pb.BacklogQuota:
    message = pb.BacklogQuota(action=_ACTION_TO_PB[BacklogQuotaAction(quota.action)])
    _set_duration(message.hold_timeout, quota.hold_timeout, "BacklogQuota.hold_timeout")
    if quota.limit_bytes is not None:
        message.limit_bytes = quota.limit_bytes
    if quota.limit_age is not None:
        _set_duration(message.limit_age, quota.limit_age, "BacklogQuota.limit_age")
    return message


def topic_policies_from_pb(message: pb.TopicPolicies) -> TopicPolicies:
    retention = None
    if message.HasField("retention"):
        time = message.retention.time_seconds
        size = message.retention.size_bytes
        retention = RetentionPolicy(
            time=None if time == _INFINITE else datetime.timedelta(seconds=time),
            size_bytes=None if size == _INFINITE else size,
        )
    quota = None
    if message.HasField("backlog_quota"):
        wire = message.backlog_quota
        quota = BacklogQuota(
            limit_bytes=wire.limit_bytes if wire.HasField("limit_bytes") else None,
            limit_age=_timedelta(wire, "limit_age"),
            action=_ACTION_FROM_PB.get(wire.action, BacklogQuotaAction.PRODUCER_REQUEST_HOLD),
            hold_timeout=wire.hold_timeout.ToTimedelta(),
        )
    return TopicPolicies(
        topic=message.topic,
        retention=retention,
        backlog_quota=quota,
        message_ttl=_timedelta(message, "message_ttl"),
    )


def subscription_policies_from_pb(message: pb.SubscriptionPolicies) -> SubscriptionPolicies:
    return SubscriptionPolicies(
        subscription=message.subscription,
        message_ttl=_timedelta(message, "message_ttl"),
        effective_message_ttl=_timedelta(message, "effective_message_ttl"),
    )


# ================================================================ calls


class PolicyCalls(AdminCalls):
    """The policy methods of :class:`~eoclient.admin.AdminClient` (one of its bases)."""

    async def _call_policies(
        self,
        method: str,
        request: Message,
        response: type[ResponseT],
        resource: tuple[str, str],
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> ResponseT:
        try:
            return await self._call(
                Request(SERVICE, method, request, response, resource), retry, timeout
            )
        except Unimplemented as missing:
            if extension_missing(missing):
                raise Unimplemented(
                    f"{method} needs eoclient's reference server (eoclient serve): this "
                    f"server does not implement {SERVICE} ({missing.message})"
                ) from missing
            raise

    # ------------------------------------------------------------ skip

    async def skip_messages(
        self,
        subscription: str,
        message_ids: Iterable[str],
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> dict[str, SkipOutcome]:
        """Acknowledge chosen messages on ``subscription`` as if a subscriber had (PIP-423).

        Returns each distinct id's :class:`SkipOutcome`, in the order given. A skipped
        message is never delivered again on that subscription (other subscriptions
        are unaffected); its outstanding ack ids become invalid (exactly-once:
        INVALID_ACK_ID); skipping the head of an ordering key releases the key's next
        message; skipping a delayed message cancels it. Skipping again is harmless.
        """
        ids = [message_ids] if isinstance(message_ids, str) else list(message_ids)
        if not ids:
            raise ValueError("skip_messages needs at least one message id")
        request = pb.SkipMessagesRequest(subscription=subscription, message_ids=ids)
        response = await self._call_policies(
            "SkipMessages",
            request,
            pb.SkipMessagesResponse,
            ("subscription", subscription),
            retry,
            timeout,
        )
        return {
            result.message_id: _OUTCOME_FROM_PB.get(result.outcome, SkipOutcome.NOT_FOUND)
            for result in response.results
        }

    # ------------------------------------------------------------ topic policies

    async def get_topic_policies(
        self, topic: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> TopicPolicies:
        request = pb.GetTopicPoliciesRequest(topic=topic)
        return topic_policies_from_pb(
            await self._call_policies(
                "GetTopicPolicies", request, pb.TopicPolicies, ("topic", topic), retry, timeout
            )
        )

    async def _set_topic_policy(
        self,
        topic: str,
        path: str,
        policies: pb.TopicPolicies,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> TopicPolicies:
        request = pb.SetTopicPoliciesRequest(topic=topic, policies=policies)
        request.update_mask.paths.append(path)
        return topic_policies_from_pb(
            await self._call_policies(
                "SetTopicPolicies", request, pb.TopicPolicies, ("topic", topic), retry, timeout
            )
        )

    async def set_topic_retention(
        self,
        topic: str,
        *,
        time: datetime.timedelta | None,
        size_bytes: int | None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> TopicPolicies:
        """Keep what ``topic`` published for ``time`` and up to ``size_bytes`` (``None``:
        no limit; both ``None``: forever), acknowledged or not, for seek to a time."""
        policies = pb.TopicPolicies(retention=retention_to_pb(RetentionPolicy(time, size_bytes)))
        return await self._set_topic_policy(topic, "retention", policies, retry, timeout)

    async def remove_topic_retention(
        self, topic: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> TopicPolicies:
        return await self._set_topic_policy(topic, "retention", pb.TopicPolicies(), retry, timeout)

    async def set_topic_backlog_quota(
        self,
        topic: str,
        *,
        limit_bytes: int | None = None,
        limit_age: datetime.timedelta | None = None,
        action: BacklogQuotaAction = BacklogQuotaAction.PRODUCER_REQUEST_HOLD,
        hold_timeout: datetime.timedelta = DEFAULT_HOLD_TIMEOUT,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> TopicPolicies:
        """Limit each subscription's unacknowledged backlog of ``topic`` by size and/or
        age; ``action`` says what Publish does when a subscription is over it."""
        quota = BacklogQuota(limit_bytes, limit_age, action, hold_timeout)
        policies = pb.TopicPolicies(backlog_quota=backlog_quota_to_pb(quota))
        return await self._set_topic_policy(topic, "backlog_quota", policies, retry, timeout)

    async def remove_topic_backlog_quota(
        self, topic: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> TopicPolicies:
        return await self._set_topic_policy(
            topic, "backlog_quota", pb.TopicPolicies(), retry, timeout
        )

    async def set_topic_message_ttl(
        self,
        topic: str,
        ttl: datetime.timedelta,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> TopicPolicies:
        """Acknowledge unacknowledged messages of ``topic`` once older than ``ttl``, on
        every subscription without a TTL of its own."""
        policies = pb.TopicPolicies()
        _set_duration(policies.message_ttl, ttl, "ttl")
        return await self._set_topic_policy(topic, "message_ttl", policies, retry, timeout)

    async def remove_topic_message_ttl(
        self, topic: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> TopicPolicies:
        return await self._set_topic_policy(
            topic, "message_ttl", pb.TopicPolicies(), retry, timeout
        )

    async def get_topic_policy_counters(
        self, topic: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> TopicPolicyCounters:
        request = pb.GetTopicPolicyCountersRequest(topic=topic)
        message = await self._call_policies(
            "GetTopicPolicyCounters",
            request,
            pb.TopicPolicyCounters,
            ("topic", topic),
            retry,
            timeout,
        )
        return TopicPolicyCounters(
            topic=message.topic,
            held_publishes=message.held_publishes,
            held_then_refused=message.held_then_refused,
            refused_publishes=message.refused_publishes,
            retained_messages=message.retained_messages,
            retained_bytes=message.retained_bytes,
            oldest_retained_publish_time=_instant(message, "oldest_retained_publish_time"),
        )

    # ------------------------------------------------------------ subscription policies

    async def get_subscription_policies(
        self, subscription: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> SubscriptionPolicies:
        request = pb.GetSubscriptionPoliciesRequest(subscription=subscription)
        message = await self._call_policies(
            "GetSubscriptionPolicies",
            request,
            pb.SubscriptionPolicies,
            ("subscription", subscription),
            retry,
            timeout,
        )
        return subscription_policies_from_pb(message)

    async def _set_subscription_ttl(
        self,
        subscription: str,
        policies: pb.SubscriptionPolicies,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> SubscriptionPolicies:
        request = pb.SetSubscriptionPoliciesRequest(subscription=subscription, policies=policies)
        request.update_mask.paths.append("message_ttl")
        message = await self._call_policies(
            "SetSubscriptionPolicies",
            request,
            pb.SubscriptionPolicies,
            ("subscription", subscription),
            retry,
            timeout,
        )
        return subscription_policies_from_pb(message)

    async def set_subscription_message_ttl(
        self,
        subscription: str,
        ttl: datetime.timedelta,
        *,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> SubscriptionPolicies:
        """The subscription's own message TTL (it wins over its topic's)."""
        policies = pb.SubscriptionPolicies()
        _set_duration(policies.message_ttl, ttl, "ttl")
        return await self._set_subscription_ttl(subscription, policies, retry, timeout)

    async def remove_subscription_message_ttl(
        self, subscription: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> SubscriptionPolicies:
        """Remove the subscription's own TTL (its topic's applies again, if any)."""
        return await self._set_subscription_ttl(
            subscription, pb.SubscriptionPolicies(), retry, timeout
        )

    async def get_subscription_policy_counters(
        self, subscription: str, *, retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> SubscriptionPolicyCounters:
        request = pb.GetSubscriptionPolicyCountersRequest(subscription=subscription)
        message = await self._call_policies(
            "GetSubscriptionPolicyCounters",
            request,
            pb.SubscriptionPolicyCounters,
            ("subscription", subscription),
            retry,
            timeout,
        )
        return SubscriptionPolicyCounters(
            subscription=message.subscription,
            skipped=message.skipped,
            evicted=message.evicted,
            expired_by_ttl=message.expired_by_ttl,
            delayed_pending=message.delayed_pending,
            backlog_messages=message.backlog_messages,
            backlog_bytes=message.backlog_bytes,
            oldest_unacked_publish_time=_instant(message, "oldest_unacked_publish_time"),
        )

    # ------------------------------------------------------------ seek

    async def seek_with_outcome(
        self,
        subscription: str,
        *,
        time: datetime.datetime | None = None,
        snapshot: str | None = None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> SeekOutcome:
        """:meth:`seek`, answering how far back it reached: a seek to a time older than
        anything retained replays from the oldest retained message
        (``complete=False``). A seek to a snapshot answers ``SeekOutcome(None, True)``.
        """
        if (time is None) == (snapshot is None):
            raise ValueError("seek_with_outcome needs exactly one of time= and snapshot=")
        request = pb.SeekWithOutcomeRequest(subscription=subscription)
        if time is not None:
            request.time.FromDatetime(utc_datetime(time, "time"))
        else:
            request.snapshot = snapshot or ""
        message = await self._call_policies(
            "SeekWithOutcome",
            request,
            pb.SeekOutcome,
            ("subscription", subscription),
            retry,
            timeout,
        )
        return SeekOutcome(_instant(message, "replayable_from"), message.complete)
