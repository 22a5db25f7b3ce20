"""Subscriber settings: defaults, and validation that names the field, value and range."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import pytest

from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)


def test_defaults_match_the_documented_values() -> None:
    assert FlowControl() == FlowControl(max_messages=1000, max_bytes=100 * 1024 * 1024)
    assert LeaseSettings() == LeaseSettings(min_extension=0, max_extension=0, max_lease=3600)
    assert AckRetrySettings() == AckRetrySettings(
        initial_backoff=0.1, max_backoff=10, multiplier=2, deadline=600
    )
    # No behavior: subscribe() nacks what is held on the way out, run() waits for it.
    assert ShutdownOptions() == ShutdownOptions(None, 30)
    assert StreamSettings().stream_ack_deadline == 60
    assert StreamSettings().keepalive_interval == 30


def test_settings_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        FlowControl().max_messages = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [
        (FlowControl, {"max_messages": 0, "max_bytes": 0}),  # 0 = unlimited
        (FlowControl, {"max_messages": 1, "max_bytes": 1}),
        (LeaseSettings, {"min_extension": 10, "max_extension": 600}),
        (LeaseSettings, {"min_extension": 60, "max_extension": 60, "max_lease": math.inf}),
        (LeaseSettings, {"max_lease": 0.5}),
        (AckRetrySettings, {"deadline": 0}),  # never retry
        (AckRetrySettings, {"deadline": math.inf}),  # retry until final, like Python
        (AckRetrySettings, {"initial_backoff": 1, "max_backoff": 1, "multiplier": 1}),
        (ShutdownOptions, {"timeout": None}),
        (ShutdownOptions, {"behavior": ShutdownBehavior.NACK_IMMEDIATELY, "timeout": 0}),
        (ShutdownOptions, {"flush_timeout": 0, "stream_close_timeout": 0}),
        (StreamSettings, {"stream_ack_deadline": 10}),
        (StreamSettings, {"stream_ack_deadline": 600, "reconnect_max_backoff": 0.1}),
    ],
)
def test_boundary_values_are_accepted(cls: type[Any], kwargs: dict[str, Any]) -> None:
    settings = cls(**kwargs)
    for name, value in kwargs.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (FlowControl, {"max_messages": -1}, "FlowControl.max_messages must be >= 0"),
        (FlowControl, {"max_bytes": -5}, "FlowControl.max_bytes must be >= 0 (0 = unlimited)"),
        (FlowControl, {"max_messages": 1.5}, "FlowControl.max_messages must be an int, got 1.5"),
        (FlowControl, {"max_messages": True}, "FlowControl.max_messages must be an int"),
        (LeaseSettings, {"min_extension": 5}, "LeaseSettings.min_extension must be 0 (unset)"),
        (LeaseSettings, {"max_extension": 601}, "between 10 and 600 seconds, got 601"),
        (LeaseSettings, {"max_extension": -1}, "LeaseSettings.max_extension"),
        (LeaseSettings, {"min_extension": math.nan}, "LeaseSettings.min_extension"),
        (
            LeaseSettings,
            {"min_extension": 100, "max_extension": 50},
            "min_extension=100 > max_extension=50",
        ),
        (LeaseSettings, {"max_lease": 0}, "LeaseSettings.max_lease must be > 0"),
        (LeaseSettings, {"max_lease": math.nan}, "LeaseSettings.max_lease"),
        (AckRetrySettings, {"initial_backoff": 0}, "AckRetrySettings.initial_backoff"),
        (AckRetrySettings, {"initial_backoff": math.inf}, "AckRetrySettings.initial_backoff"),
        (
            AckRetrySettings,
            {"initial_backoff": 2, "max_backoff": 1},
            "AckRetrySettings.max_backoff must be between 2 and inf, got 1",
        ),
        (AckRetrySettings, {"multiplier": 0.5}, "AckRetrySettings.multiplier"),
        (AckRetrySettings, {"deadline": -1}, "AckRetrySettings.deadline"),
        (ShutdownOptions, {"timeout": -1}, "ShutdownOptions.timeout must be between 0"),
        (ShutdownOptions, {"behavior": "nack"}, "ShutdownOptions.behavior"),
        (ShutdownOptions, {"flush_timeout": -1}, "ShutdownOptions.flush_timeout"),
        (
            ShutdownOptions,
            {"stream_close_timeout": float("nan")},
            "ShutdownOptions.stream_close_timeout",
        ),
        (StreamSettings, {"stream_ack_deadline": 9}, "StreamSettings.stream_ack_deadline"),
        (StreamSettings, {"keepalive_interval": 0}, "StreamSettings.keepalive_interval"),
        (
            StreamSettings,
            {"reconnect_initial_backoff": 1, "reconnect_max_backoff": 0.5},
            "StreamSettings.reconnect_max_backoff",
        ),
    ],
)
def test_invalid_values_are_rejected_with_a_clear_message(
    cls: type[Any], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        cls(**kwargs)
