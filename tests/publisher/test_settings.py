"""Publisher settings: defaults from the official clients, and clear rejections."""

from __future__ import annotations

import math

import pytest

from eoclient.publisher.settings import (
    RETRYABLE_PUBLISH_CODES,
    BatchSettings,
    LimitExceededBehavior,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.publisher.validation import MAX_PUBLISH_REQUEST_BYTES, MAX_PUBLISH_REQUEST_MESSAGES


def test_defaults_match_the_official_python_publisher() -> None:
    # docs/protocol.md#publisher-batching, docs/protocol.md#publisher-flow-control and
    # docs/protocol.md#publish-retries
    assert BatchSettings() == BatchSettings(max_messages=100, max_bytes=1_000_000, max_latency=0.01)
    assert PublishFlowControl() == PublishFlowControl(
        max_messages=1000, max_bytes=10_000_000, behavior=LimitExceededBehavior.IGNORE
    )
    retry = PublishRetrySettings()
    assert (retry.initial_backoff, retry.max_backoff, retry.multiplier, retry.deadline) == (
        0.1,
        60.0,
        4.0,
        600.0,
    )
    assert retry.attempt_timeout == 60.0
    assert {
        "ABORTED",
        "CANCELLED",
        "DEADLINE_EXCEEDED",
        "INTERNAL",
        "RESOURCE_EXHAUSTED",
        "UNAVAILABLE",
        "UNKNOWN",
    } == RETRYABLE_PUBLISH_CODES


def test_batch_limits_accept_the_server_maxima() -> None:
    settings = BatchSettings(
        max_messages=MAX_PUBLISH_REQUEST_MESSAGES,
        max_bytes=MAX_PUBLISH_REQUEST_BYTES,
        max_latency=math.inf,
    )
    assert settings.max_messages == 1000
    assert BatchSettings(max_latency=0).max_latency == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_messages": 0}, r"BatchSettings\.max_messages must be between 1 and 1000, got 0"),
        ({"max_messages": 1001}, r"max_messages must be between 1 and 1000, got 1001"),
        ({"max_messages": True}, r"max_messages must be an int, got True"),
        ({"max_messages": 10.0}, r"max_messages must be an int"),
        ({"max_bytes": 0}, r"max_bytes must be between 1 and 10000000, got 0"),
        ({"max_bytes": 10_000_001}, r"max_bytes must be between 1 and 10000000"),
        ({"max_latency": -0.1}, r"max_latency must be >= 0 seconds"),
        ({"max_latency": math.nan}, r"max_latency must be >= 0 seconds"),
    ],
)
def test_batch_settings_rejections(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BatchSettings(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_messages": -1}, r"PublishFlowControl\.max_messages must be >= 0 \(0 = unlimited\)"),
        ({"max_bytes": -5}, r"max_bytes must be >= 0 \(0 = unlimited\), got -5"),
        ({"max_bytes": 1.5}, r"max_bytes must be an int"),
        ({"behavior": "block"}, r"behavior must be a LimitExceededBehavior"),
    ],
)
def test_flow_control_rejections(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PublishFlowControl(**kwargs)  # type: ignore[arg-type]


def test_flow_control_zero_means_unlimited_and_is_accepted() -> None:
    settings = PublishFlowControl(max_messages=0, max_bytes=0)
    assert (settings.max_messages, settings.max_bytes) == (0, 0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"initial_backoff": 0}, r"initial_backoff must be a finite number of seconds > 0"),
        ({"initial_backoff": math.inf}, r"initial_backoff must be a finite"),
        ({"initial_backoff": 2, "max_backoff": 1}, r"max_backoff must be >= initial_backoff"),
        ({"multiplier": 0.5}, r"multiplier must be >= 1, got 0.5"),
        ({"deadline": -1}, r"deadline must be >= 0 seconds"),
        ({"deadline": math.nan}, r"deadline must be >= 0 seconds"),
        ({"attempt_timeout": 0}, r"attempt_timeout must be > 0 seconds"),
    ],
)
def test_retry_rejections(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        PublishRetrySettings(**kwargs)  # type: ignore[arg-type]


def test_retry_forever_and_never_are_expressible() -> None:
    assert PublishRetrySettings(deadline=math.inf).deadline == math.inf
    assert PublishRetrySettings(deadline=0).deadline == 0


def test_settings_are_frozen() -> None:
    settings = BatchSettings()
    with pytest.raises(AttributeError):
        settings.max_messages = 5  # type: ignore[misc]
