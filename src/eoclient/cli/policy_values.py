"""Pulsar-style flag values of the policy verbs, and how policies are shown.

Pure. The units are ``pulsar-admin``'s, so its commands carry over:

* times (``--time``, ``--limit-time``, ``--ttl``): the command's one duration grammar
  (``values.parse_duration``), which reads pulsar-admin's ``120``, ``100m``, ``3h``,
  ``2d``, ``5w``, ``1y``; ``-1`` is forever for ``--time`` (retention) only;
* sizes (``--size``, ``--limit``): a number of bytes with an optional unit k, m, g or t
  (powers of 1024, either case): ``4096``, ``10M``, ``16G``, ``3T``; ``-1`` infinite.

JSON records use the REST/JSON forms of ``eoclient.broker.v1`` (``GET
/v1/{topic}/policies``: ``timeSeconds``, ``"3600s"`` durations, action names), every
field present (``null`` when unset), like the other verbs' records.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from eoclient.admin import (
    BacklogQuota,
    RetentionPolicy,
    SeekOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.cli.errors import CliError
from eoclient.cli.values import format_duration, wire_duration, wire_time

Record = dict[str, Any]

INFINITE = "-1"
_SIZE_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"(\d+)([kmgt]?)", re.IGNORECASE)
SIZE_EXAMPLES = "4096, 10M, 16G or 3T"


def parse_size(text: str) -> int | None:
    """``"10G"`` → 10 GiB in bytes; ``"-1"`` → None (infinite)."""
    value = text.strip()
    if value == INFINITE:
        return None
    found = _SIZE.fullmatch(value)
    if found is None:
        raise CliError(
            f"invalid size {text!r}: a whole number of bytes with an optional unit k, m, g "
            f"or t (e.g. {SIZE_EXAMPLES}), or -1 for infinite"
        )
    return int(found[1]) * _SIZE_UNITS[found[2].lower()]


def format_size(size: int) -> str:
    """For people: ``10G``, ``512M``, ``1000`` (a form :func:`parse_size` reads)."""
    for unit in ("T", "G", "M", "K"):
        scale = _SIZE_UNITS[unit.lower()]
        if size and size % scale == 0:
            return f"{size // scale}{unit}"
    return str(size)


def _human_time(value: datetime.timedelta | None) -> str:
    return "infinite" if value is None else format_duration(value)


def _instant(value: datetime.datetime | None) -> str | None:
    return None if value is None else wire_time(value)


# ================================================================ records (JSON)


def retention_record(retention: RetentionPolicy | None) -> Record | None:
    if retention is None:
        return None
    time = -1 if retention.time is None else int(retention.time.total_seconds())
    size = -1 if retention.size_bytes is None else retention.size_bytes
    return {"timeSeconds": time, "sizeBytes": size}


def quota_record(quota: BacklogQuota | None) -> Record | None:
    if quota is None:
        return None
    return {
        "limitBytes": quota.limit_bytes,
        "limitAge": None if quota.limit_age is None else wire_duration(quota.limit_age),
        "action": quota.action.name,
        "holdTimeout": wire_duration(quota.hold_timeout),
    }


def topic_policies_record(policies: TopicPolicies) -> Record:
    return {
        "topic": policies.topic,
        "retention": retention_record(policies.retention),
        "backlogQuota": quota_record(policies.backlog_quota),
        "messageTtl": None if policies.message_ttl is None else wire_duration(policies.message_ttl),
    }


def topic_counters_record(counters: TopicPolicyCounters) -> Record:
    return {
        "heldPublishes": counters.held_publishes,
        "heldThenRefused": counters.held_then_refused,
        "refusedPublishes": counters.refused_publishes,
        "retainedMessages": counters.retained_messages,
        "retainedBytes": counters.retained_bytes,
        "oldestRetainedPublishTime": _instant(counters.oldest_retained_publish_time),
    }


def subscription_policies_record(policies: SubscriptionPolicies) -> Record:
    def ttl(value: datetime.timedelta | None) -> str | None:
        return None if value is None else wire_duration(value)

    return {
        "subscription": policies.subscription,
        "messageTtl": ttl(policies.message_ttl),
        "effectiveMessageTtl": ttl(policies.effective_message_ttl),
    }


def subscription_counters_record(counters: SubscriptionPolicyCounters) -> Record:
    return {
        "skipped": counters.skipped,
        "evicted": counters.evicted,
        "expiredByTtl": counters.expired_by_ttl,
        "delayedPending": counters.delayed_pending,
        "backlogMessages": counters.backlog_messages,
        "backlogBytes": counters.backlog_bytes,
        "oldestUnackedPublishTime": _instant(counters.oldest_unacked_publish_time),
    }


def seek_outcome_record(outcome: SeekOutcome | None) -> Record:
    """The outcome's part of ``seek --time``'s record (nulls: the server did not say)."""
    if outcome is None:
        return {"replayableFrom": None, "complete": None}
    return {"replayableFrom": _instant(outcome.replayable_from), "complete": outcome.complete}


# ================================================================ fields (people)


def topic_policy_fields(
    policies: TopicPolicies, counters: TopicPolicyCounters | None = None
) -> list[tuple[str, str]]:
    retention = policies.retention
    quota = policies.backlog_quota
    rows = [("topic", policies.topic)]
    if retention is None:
        rows.append(("retention", "none"))
    else:
        size = "infinite" if retention.size_bytes is None else format_size(retention.size_bytes)
        rows.append(("retention", f"time {_human_time(retention.time)}, size {size}"))
    if quota is None:
        rows.append(("backlog quota", "none"))
    else:
        limits = []
        if quota.limit_bytes is not None:
            limits.append(f"size {format_size(quota.limit_bytes)}")
        if quota.limit_age is not None:
            limits.append(f"age {format_duration(quota.limit_age)}")
        action = quota.action.value
        if quota.action.name == "PRODUCER_REQUEST_HOLD":
            action += f" (hold {format_duration(quota.hold_timeout)})"
        rows.append(("backlog quota", f"{', '.join(limits)}: {action}"))
    ttl = policies.message_ttl
    rows.append(("message ttl", "none" if ttl is None else format_duration(ttl)))
    if counters is not None:
        rows += [
            ("held publishes", f"{counters.held_publishes} ({counters.held_then_refused} refused)"),
            ("refused publishes", str(counters.refused_publishes)),
            ("retained", f"{counters.retained_messages} messages, {counters.retained_bytes} bytes"),
            ("oldest retained", _instant(counters.oldest_retained_publish_time) or ""),
        ]
    return rows


def subscription_policy_fields(
    policies: SubscriptionPolicies, counters: SubscriptionPolicyCounters | None = None
) -> list[tuple[str, str]]:
    own, effective = policies.message_ttl, policies.effective_message_ttl
    if own is not None:
        ttl = format_duration(own)
    elif effective is not None:
        ttl = f"{format_duration(effective)} (the topic's)"
    else:
        ttl = "none"
    rows = [("subscription", policies.subscription), ("message ttl", ttl)]
    if counters is not None:
        rows += [
            ("skipped", str(counters.skipped)),
            ("evicted", str(counters.evicted)),
            ("expired by ttl", str(counters.expired_by_ttl)),
            ("delayed pending", str(counters.delayed_pending)),
            ("backlog", f"{counters.backlog_messages} messages, {counters.backlog_bytes} bytes"),
            ("oldest unacked", _instant(counters.oldest_unacked_publish_time) or ""),
        ]
    return rows
