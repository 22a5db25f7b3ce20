"""How each resource is shown: a JSON record for scripts, fields and columns for people.

JSON records use the field names and value forms of the REST/JSON mapping (what the
service's REST API and ``gcloud --format json`` print: camelCase names, durations as
``"600s"``, times as RFC 3339 in UTC), but every field is always present (``null``
when unset) so a script can index without guarding. Tables show the same facts in
the forms the flags take (``7d``, ``1h30m``).
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from eoclient.admin import (
    DeadLetterPolicy,
    ExpirationPolicy,
    PushConfig,
    RetryPolicy,
    Snapshot,
    Subscription,
    Topic,
)
from eoclient.admin.transforms import MessageTransform
from eoclient.cli.export_flags import export_fields, export_records
from eoclient.cli.ingestion import ingestion_record, ingestion_summary
from eoclient.cli.values import format_duration, wire_duration, wire_time
from eoclient.subscriber import AckResult, Message

T = TypeVar("T")
Record = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Column(Generic[T]):
    """One column of a list table: its header and how to show one item in it."""

    header: str
    show: Callable[[T], str]


# ================================================================ small forms


def transforms_record(transforms: Sequence[MessageTransform]) -> list[Record]:
    """Message transforms in the REST form (what --message-transforms-file reads)."""
    records: list[Record] = []
    for transform in transforms:
        record: Record = {"disabled": transform.disabled}
        if transform.javascript_udf is not None:
            udf = transform.javascript_udf
            record["javascriptUdf"] = {"functionName": udf.function_name, "code": udf.code}
        records.append(record)
    return records


def human_transforms(transforms: Sequence[MessageTransform]) -> str:
    """``redactSSN, audit (disabled)``: each transform's function, in order."""
    names = []
    for transform in transforms:
        udf = transform.javascript_udf
        name = udf.function_name if udf is not None else "(not a JavaScript UDF)"
        names.append(f"{name} (disabled)" if transform.disabled else name)
    return ", ".join(names)


def _labels(labels: Mapping[str, str]) -> dict[str, str]:
    return dict(sorted(labels.items()))


def _duration(value: datetime.timedelta | None) -> str | None:
    return None if value is None else wire_duration(value)


def _time(value: datetime.datetime | None) -> str | None:
    return None if value is None else wire_time(value)


def human_duration(value: datetime.timedelta | None, unset: str = "") -> str:
    return unset if value is None else format_duration(value)


def human_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def short(name: str) -> str:
    """The id at the end of a full resource name (``projects/p/topics/t`` → ``t``)."""
    return name.rsplit("/", 1)[-1]


def _yes(value: bool) -> str:
    return "yes" if value else "no"


# ================================================================ topics


def topic_record(topic: Topic) -> Record:
    return {
        "name": topic.name,
        "labels": _labels(topic.labels),
        "messageRetentionDuration": _duration(topic.message_retention_duration),
        "kmsKeyName": topic.kms_key_name,
        "messageTransforms": transforms_record(topic.message_transforms),
        "ingestionDataSourceSettings": ingestion_record(topic.ingestion_data_source_settings),
        "state": topic.state.name,
    }


def topic_fields(topic: Topic) -> list[tuple[str, str]]:
    return [
        ("name", topic.name),
        ("labels", human_labels(topic.labels)),
        (
            "message retention",
            human_duration(topic.message_retention_duration, "none (subscriptions decide)"),
        ),
        ("kms key", topic.kms_key_name),
        ("message transforms", human_transforms(topic.message_transforms)),
        ("ingestion", ingestion_summary(topic.ingestion_data_source_settings)),
        ("state", topic.state.name),
    ]


TOPIC_COLUMNS: Sequence[Column[Topic]] = (
    Column("NAME", lambda t: t.name),
    Column("RETENTION", lambda t: human_duration(t.message_retention_duration)),
    Column("LABELS", lambda t: human_labels(t.labels)),
)


# ================================================================ subscriptions


def _dead_letter_record(policy: DeadLetterPolicy | None) -> Record | None:
    if policy is None:
        return None
    return {
        "deadLetterTopic": policy.dead_letter_topic,
        "maxDeliveryAttempts": policy.max_delivery_attempts,
    }


def _retry_record(policy: RetryPolicy | None) -> Record | None:
    if policy is None:
        return None
    return {
        "minimumBackoff": wire_duration(policy.minimum_backoff),
        "maximumBackoff": wire_duration(policy.maximum_backoff),
    }


def _expiration_record(policy: ExpirationPolicy | None) -> Record | None:
    return None if policy is None else {"ttl": _duration(policy.ttl)}


def _push_record(config: PushConfig | None) -> Record | None:
    if config is None:
        return None
    return {
        "pushEndpoint": config.endpoint,
        "attributes": dict(config.attributes),
        "serviceAccountEmail": config.service_account_email,
        "audience": config.audience,
        "noWrapper": config.no_wrapper,
        "writeMetadata": config.write_metadata,
    }


def subscription_record(subscription: Subscription) -> Record:
    s = subscription
    return {
        "name": s.name,
        "topic": s.topic,
        "ackDeadlineSeconds": s.ack_deadline_seconds,
        "retainAckedMessages": s.retain_acked_messages,
        "messageRetentionDuration": _duration(s.message_retention_duration),
        "labels": _labels(s.labels),
        "enableMessageOrdering": s.enable_message_ordering,
        "expirationPolicy": _expiration_record(s.expiration_policy),
        "filter": s.filter,
        "deadLetterPolicy": _dead_letter_record(s.dead_letter_policy),
        "retryPolicy": _retry_record(s.retry_policy),
        "enableExactlyOnceDelivery": s.enable_exactly_once_delivery,
        "pushConfig": _push_record(s.push_config),
        **export_records(s),
        "messageTransforms": transforms_record(s.message_transforms),
        "detached": s.detached,
        "topicMessageRetentionDuration": _duration(s.topic_message_retention_duration),
        "state": s.state.name,
    }


def _human_expiration(policy: ExpirationPolicy | None) -> str:
    if policy is None:
        return "default (31d idle)"
    if policy.ttl is None:
        return "never"
    return f"after {format_duration(policy.ttl)} idle"


def _human_dead_letter(policy: DeadLetterPolicy | None) -> str:
    if policy is None:
        return ""
    return f"{policy.dead_letter_topic} after {policy.max_delivery_attempts} attempts"


def _human_retry(policy: RetryPolicy | None) -> str:
    if policy is None:
        return "redeliver at once"
    low, high = format_duration(policy.minimum_backoff), format_duration(policy.maximum_backoff)
    return f"backoff {low}..{high}"


def subscription_fields(subscription: Subscription) -> list[tuple[str, str]]:
    s = subscription
    return [
        ("name", s.name),
        ("topic", s.topic),
        ("ack deadline", f"{s.ack_deadline_seconds}s" if s.ack_deadline_seconds else "default"),
        ("exactly-once delivery", _yes(s.enable_exactly_once_delivery)),
        ("message ordering", _yes(s.enable_message_ordering)),
        ("filter", s.filter),
        ("dead letter", _human_dead_letter(s.dead_letter_policy)),
        ("retry", _human_retry(s.retry_policy)),
        ("retain acked messages", _yes(s.retain_acked_messages)),
        ("message retention", human_duration(s.message_retention_duration, "default (7d)")),
        ("expiration", _human_expiration(s.expiration_policy)),
        ("push endpoint", s.push_config.endpoint if s.push_config else ""),
        *export_fields(s),
        ("message transforms", human_transforms(s.message_transforms)),
        ("labels", human_labels(s.labels)),
        ("detached", _yes(s.detached)),
        ("topic retention", human_duration(s.topic_message_retention_duration)),
        ("state", s.state.name),
    ]


SUBSCRIPTION_COLUMNS: Sequence[Column[Subscription]] = (
    Column("NAME", lambda s: s.name),
    Column("TOPIC", lambda s: s.topic),
    Column("ACK DEADLINE", lambda s: f"{s.ack_deadline_seconds}s"),
    Column("EXACTLY-ONCE", lambda s: _yes(s.enable_exactly_once_delivery)),
    Column("ORDERING", lambda s: _yes(s.enable_message_ordering)),
    Column("FILTER", lambda s: s.filter),
    Column(
        "DEAD LETTER",
        lambda s: short(s.dead_letter_policy.dead_letter_topic) if s.dead_letter_policy else "",
    ),
    Column("LABELS", lambda s: human_labels(s.labels)),
)


# ================================================================ snapshots


def snapshot_record(snapshot: Snapshot) -> Record:
    return {
        "name": snapshot.name,
        "topic": snapshot.topic,
        "expireTime": _time(snapshot.expire_time),
        "labels": _labels(snapshot.labels),
    }


def snapshot_fields(snapshot: Snapshot) -> list[tuple[str, str]]:
    return [
        ("name", snapshot.name),
        ("topic", snapshot.topic),
        ("expires", _time(snapshot.expire_time) or ""),
        ("labels", human_labels(snapshot.labels)),
    ]


SNAPSHOT_COLUMNS: Sequence[Column[Snapshot]] = (
    Column("NAME", lambda s: s.name),
    Column("TOPIC", lambda s: s.topic),
    Column("EXPIRES", lambda s: _time(s.expire_time) or ""),
    Column("LABELS", lambda s: human_labels(s.labels)),
)


# ================================================================ messages


def text_of(data: bytes) -> str | None:
    """The payload as text, or None if it is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def human_data(data: bytes) -> str:
    """The payload on one line: text with control characters escaped, else base64."""
    text = text_of(data)
    if text is None:
        return "base64:" + base64.b64encode(data).decode("ascii")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def message_record(message: Message, ack: AckResult | None, settled: str) -> Record:
    """A received message; ``data`` is its text (null if not UTF-8), ``dataBase64`` its bytes."""
    return {
        "messageId": message.message_id,
        "data": text_of(message.data),
        "dataBase64": base64.b64encode(message.data).decode("ascii"),
        "attributes": dict(message.attributes),
        "orderingKey": message.ordering_key,
        "publishTime": wire_time(message.publish_time),
        "deliveryAttempt": message.delivery_attempt,
        "ackId": message.ack_id,
        "settled": settled or None,
        "ackStatus": ack.status.name if ack is not None else None,
        "ackInfo": ack.info if ack is not None and ack.info else None,
    }


def ack_status_text(ack: AckResult | None, settled: str) -> str:
    """``ACK SUCCESS``, ``NACK INVALID_ACK_ID (reason)``, or ``-`` when left leased."""
    if ack is None or not settled:
        return "-"
    text = f"{settled.upper()} {ack.status.name}"
    return f"{text} ({ack.info})" if ack.info else text
