"""Resource configs as JSON text, for the durable store.

Explicit field by field (not ``dataclasses.asdict``) so a stored document is a stable
format: a field added to a config later reads back as its default from older files.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from eoclient.server_stub.core.model import (
    DeadLetterPolicy,
    ExpirationPolicy,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)


def _bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _unbytes(value: str) -> bytes:
    return base64.b64decode(value.encode("ascii"))


def topic_to_json(config: TopicConfig) -> str:
    return json.dumps(
        {
            "name": config.name,
            "labels": dict(config.labels),
            "message_retention_duration": config.message_retention_duration,
            "kms_key_name": config.kms_key_name,
            "extras": _bytes(config.extras),
        },
        sort_keys=True,
    )


def topic_from_json(text: str) -> TopicConfig:
    document: dict[str, Any] = json.loads(text)
    return TopicConfig(
        name=document["name"],
        labels=dict(document.get("labels", {})),
        message_retention_duration=document.get("message_retention_duration"),
        kms_key_name=document.get("kms_key_name", ""),
        extras=_unbytes(document.get("extras", "")),
    )


def subscription_to_json(config: SubscriptionConfig) -> str:
    expiration = config.expiration_policy
    dead_letter = config.dead_letter_policy
    retry = config.retry_policy
    return json.dumps(
        {
            "name": config.name,
            "topic": config.topic,
            "ack_deadline_seconds": config.ack_deadline_seconds,
            "retain_acked_messages": config.retain_acked_messages,
            "message_retention_duration": config.message_retention_duration,
            "labels": dict(config.labels),
            "enable_message_ordering": config.enable_message_ordering,
            "expiration_policy": None if expiration is None else {"ttl": expiration.ttl},
            "filter": config.filter,
            "dead_letter_policy": None
            if dead_letter is None
            else {
                "dead_letter_topic": dead_letter.dead_letter_topic,
                "max_delivery_attempts": dead_letter.max_delivery_attempts,
            },
            "retry_policy": None
            if retry is None
            else {
                "minimum_backoff": retry.minimum_backoff,
                "maximum_backoff": retry.maximum_backoff,
            },
            "detached": config.detached,
            "enable_exactly_once_delivery": config.enable_exactly_once_delivery,
            "extras": _bytes(config.extras),
        },
        sort_keys=True,
    )


def subscription_from_json(text: str) -> SubscriptionConfig:
    document: dict[str, Any] = json.loads(text)
    expiration: Mapping[str, Any] | None = document.get("expiration_policy")
    dead_letter: Mapping[str, Any] | None = document.get("dead_letter_policy")
    retry: Mapping[str, Any] | None = document.get("retry_policy")
    return SubscriptionConfig(
        name=document["name"],
        topic=document["topic"],
        ack_deadline_seconds=document.get("ack_deadline_seconds", 0),
        retain_acked_messages=document.get("retain_acked_messages", False),
        message_retention_duration=document.get("message_retention_duration"),
        labels=dict(document.get("labels", {})),
        enable_message_ordering=document.get("enable_message_ordering", False),
        expiration_policy=None if expiration is None else ExpirationPolicy(expiration["ttl"]),
        filter=document.get("filter", ""),
        dead_letter_policy=None
        if dead_letter is None
        else DeadLetterPolicy(
            dead_letter["dead_letter_topic"], dead_letter["max_delivery_attempts"]
        ),
        retry_policy=None
        if retry is None
        else RetryPolicy(retry["minimum_backoff"], retry["maximum_backoff"]),
        detached=document.get("detached", False),
        enable_exactly_once_delivery=document.get("enable_exactly_once_delivery", False),
        extras=_unbytes(document.get("extras", "")),
    )


def attributes_to_json(attributes: Mapping[str, str]) -> str | None:
    return json.dumps(attributes, separators=(",", ":")) if attributes else None


def attributes_from_json(text: str | None) -> dict[str, str]:
    return json.loads(text) if text else {}
