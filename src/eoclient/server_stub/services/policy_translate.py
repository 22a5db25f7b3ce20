"""eoclient.broker.v1 protobufs <-> the broker core's policy values (``core/policies.py``).

Field by field, with the wire's "unset" rules made explicit (broker_policies.proto):

* ``retention`` unset, or 0 and 0, is no retention policy; -1 is infinite;
* a backlog quota's ``limit_bytes`` / ``limit_age`` unset is no such limit, its action
  unset is Pulsar's default (PRODUCER_REQUEST_HOLD), its ``hold_timeout`` unset is
  ``DEFAULT_HOLD_TIMEOUT`` (30 s);
* ``message_ttl`` unset is no TTL (a subscription's: the topic's applies).

Values are checked by the core (``TopicPolicies.validate``), which names the field and
the rule; only what the core cannot see (an unknown update-mask path) is refused here.
"""

from __future__ import annotations

from collections.abc import Sequence

from eoclient._proto import broker_policies_pb2 as pb
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core.policies import (
    DEFAULT_HOLD_TIMEOUT,
    BacklogQuota,
    QuotaAction,
    RetentionPolicy,
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.server_stub.services.translate import _set_duration, _set_timestamp, seconds_of

TOPIC_POLICY_PATHS = ("retention", "backlog_quota", "message_ttl")
SUBSCRIPTION_POLICY_PATHS = ("message_ttl",)

_ACTION_OF_PB = {
    pb.BacklogQuota.ACTION_UNSPECIFIED: QuotaAction.HOLD,
    pb.BacklogQuota.PRODUCER_REQUEST_HOLD: QuotaAction.HOLD,
    pb.BacklogQuota.PRODUCER_EXCEPTION: QuotaAction.EXCEPTION,
    pb.BacklogQuota.CONSUMER_BACKLOG_EVICTION: QuotaAction.EVICTION,
}
_PB_OF_ACTION = {
    QuotaAction.HOLD: pb.BacklogQuota.PRODUCER_REQUEST_HOLD,
    QuotaAction.EXCEPTION: pb.BacklogQuota.PRODUCER_EXCEPTION,
    QuotaAction.EVICTION: pb.BacklogQuota.CONSUMER_BACKLOG_EVICTION,
}
_PB_OF_OUTCOME = {
    SkipOutcome.SKIPPED: pb.SkippedMessage.SKIPPED,
    SkipOutcome.ALREADY_ACKNOWLEDGED: pb.SkippedMessage.ALREADY_ACKNOWLEDGED,
    SkipOutcome.NOT_FOUND: pb.SkippedMessage.NOT_FOUND,
}


# ================================================================ topic policies


def retention_from_pb(message: pb.TopicPolicies) -> RetentionPolicy | None:
    if not message.HasField("retention"):
        return None
    retention = RetentionPolicy(
        time=float(message.retention.time_seconds), size=message.retention.size_bytes
    )
    # 0 and 0 is Pulsar's "disabled": kept as no policy, so a GET shows none.
    return None if retention.time == 0 and retention.size == 0 else retention


def backlog_quota_from_pb(message: pb.TopicPolicies) -> BacklogQuota | None:
    if not message.HasField("backlog_quota"):
        return None
    quota = message.backlog_quota
    action = _ACTION_OF_PB.get(quota.action)
    if action is None:
        raise InvalidArgument(
            f"backlog_quota.action {quota.action} is not one of PRODUCER_REQUEST_HOLD, "
            "PRODUCER_EXCEPTION, CONSUMER_BACKLOG_EVICTION."
        )
    return BacklogQuota(
        limit_bytes=quota.limit_bytes if quota.HasField("limit_bytes") else None,
        limit_age=seconds_of(quota.limit_age) if quota.HasField("limit_age") else None,
        action=action,
        hold_timeout=(
            seconds_of(quota.hold_timeout)
            if quota.HasField("hold_timeout")
            else DEFAULT_HOLD_TIMEOUT
        ),
    )


def _ttl_from_pb(message: pb.TopicPolicies | pb.SubscriptionPolicies) -> float | None:
    return seconds_of(message.message_ttl) if message.HasField("message_ttl") else None


def topic_policies_from_pb(message: pb.TopicPolicies) -> TopicPolicies:
    return TopicPolicies(
        retention=retention_from_pb(message),
        backlog_quota=backlog_quota_from_pb(message),
        message_ttl=_ttl_from_pb(message),
    )


def topic_policies_to_pb(topic: str, policies: TopicPolicies) -> pb.TopicPolicies:
    message = pb.TopicPolicies(topic=topic)
    retention = policies.retention
    if retention is not None and retention.enabled:
        message.retention.time_seconds = int(retention.time)
        message.retention.size_bytes = retention.size
    quota = policies.backlog_quota
    if quota is not None:
        message.backlog_quota.action = _PB_OF_ACTION[quota.action]
        if quota.limit_bytes is not None:
            message.backlog_quota.limit_bytes = quota.limit_bytes
        if quota.limit_age is not None:
            _set_duration(message.backlog_quota.limit_age, quota.limit_age)
        _set_duration(message.backlog_quota.hold_timeout, quota.hold_timeout)
    if policies.message_ttl is not None:
        _set_duration(message.message_ttl, policies.message_ttl)
    return message


def check_mask(paths: Sequence[str], allowed: Sequence[str], what: str) -> list[str]:
    """The mask's paths (empty: all of ``allowed``); an unknown one is refused."""
    unknown = [path for path in paths if path not in allowed]
    if unknown:
        raise InvalidArgument(
            f"Invalid update_mask provided in the {what} request: {', '.join(unknown)} "
            f"(the policies are {', '.join(allowed)})."
        )
    return list(paths) or list(allowed)


def merged_topic_policies(
    current: TopicPolicies, requested: pb.TopicPolicies, paths: Sequence[str]
) -> TopicPolicies:
    """``current`` with the policies ``paths`` names taken from ``requested``."""
    paths = check_mask(paths, TOPIC_POLICY_PATHS, "SetTopicPolicies")
    return TopicPolicies(
        retention=(retention_from_pb(requested) if "retention" in paths else current.retention),
        backlog_quota=(
            backlog_quota_from_pb(requested) if "backlog_quota" in paths else current.backlog_quota
        ),
        message_ttl=_ttl_from_pb(requested) if "message_ttl" in paths else current.message_ttl,
    )


# ========================================================= subscription policies


def merged_subscription_policies(
    current: SubscriptionPolicies, requested: pb.SubscriptionPolicies, paths: Sequence[str]
) -> SubscriptionPolicies:
    paths = check_mask(paths, SUBSCRIPTION_POLICY_PATHS, "SetSubscriptionPolicies")
    ttl = _ttl_from_pb(requested) if "message_ttl" in paths else current.message_ttl
    return SubscriptionPolicies(message_ttl=ttl)


def subscription_policies_to_pb(
    subscription: str, policies: SubscriptionPolicies, topic_ttl: float | None
) -> pb.SubscriptionPolicies:
    """``topic_ttl``: the TTL of the subscription's topic (None: none, or no topic)."""
    message = pb.SubscriptionPolicies(subscription=subscription)
    if policies.message_ttl is not None:
        _set_duration(message.message_ttl, policies.message_ttl)
    # The subscription's TTL wins over its topic's (policies.py, docs/protocol.md#message-ttl).
    effective = policies.message_ttl if policies.message_ttl is not None else topic_ttl
    if effective is not None:
        _set_duration(message.effective_message_ttl, effective)
    return message


# ================================================================ results


def skip_results_to_pb(outcomes: dict[str, SkipOutcome]) -> pb.SkipMessagesResponse:
    return pb.SkipMessagesResponse(
        results=[
            pb.SkippedMessage(message_id=message_id, outcome=_PB_OF_OUTCOME[outcome])
            for message_id, outcome in outcomes.items()
        ]
    )


def topic_counters_to_pb(topic: str, counters: TopicPolicyCounters) -> pb.TopicPolicyCounters:
    message = pb.TopicPolicyCounters(
        topic=topic,
        held_publishes=counters.held_publishes,
        held_then_refused=counters.held_then_refused,
        refused_publishes=counters.refused_publishes,
        retained_messages=counters.retained_messages,
        retained_bytes=counters.retained_bytes,
    )
    if counters.oldest_retained_publish_time is not None:
        _set_timestamp(message.oldest_retained_publish_time, counters.oldest_retained_publish_time)
    return message


def subscription_counters_to_pb(
    subscription: str, counters: SubscriptionPolicyCounters
) -> pb.SubscriptionPolicyCounters:
    message = pb.SubscriptionPolicyCounters(
        subscription=subscription,
        skipped=counters.skipped,
        evicted=counters.evicted,
        expired_by_ttl=counters.expired_by_ttl,
        delayed_pending=counters.delayed_pending,
        backlog_messages=counters.backlog_messages,
        backlog_bytes=counters.backlog_bytes,
    )
    if counters.oldest_unacked_publish_time is not None:
        _set_timestamp(message.oldest_unacked_publish_time, counters.oldest_unacked_publish_time)
    return message


def seek_outcome_to_pb(outcome: SeekOutcome) -> pb.SeekOutcome:
    message = pb.SeekOutcome(complete=outcome.complete)
    if outcome.replayable_from is not None:
        _set_timestamp(message.replayable_from, outcome.replayable_from)
    return message
