"""The dashboard's numbers and times: each with its unit, times as the command writes them."""

from __future__ import annotations

import datetime

import pytest

from eoclient.cli.values import parse_duration, parse_time
from eoclient.server_stub.observe.dashboard import formats


def test_times_are_utc_with_a_z_and_read_back_by_the_command() -> None:
    assert formats.when(0) == "1970-01-01T00:00:00Z"
    assert formats.when(1_767_225_600.7) == "2026-01-01T00:00:00Z"
    now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert parse_time(formats.when(1_767_225_600), now) == now


@pytest.mark.parametrize(
    ("seconds", "shown", "exact"),
    [
        (0.5, "0.5s", True),
        (45, "45s", True),
        (90, "1m30s", True),
        (7200, "2h", True),
        (5400, "1h30m", True),
        (7 * 86400, "7d", True),
        (2 * 86400 + 3600, "2d1h", True),
        (7 * 86400 + 1, "7d", False),  # its size is what matters: two units at most
    ],
)
def test_durations_use_the_commands_units(seconds: float, shown: str, exact: bool) -> None:
    assert formats.duration(seconds) == shown
    assert (parse_duration(shown).total_seconds() == seconds) == exact


def test_counts_sizes_and_rates_carry_their_units() -> None:
    assert formats.count(1, "message") == "1 message"
    assert formats.count(1107, "message") == "1,107 messages"
    assert formats.count(2, "publish", "publishes") == "2 publishes"
    assert formats.size(191) == "191 B"
    assert formats.size(94049) == "91.8 KiB"
    assert formats.size(3 * 2**20) == "3.0 MiB"
    assert formats.rate(12.25) == "12.2 msg/s"
    assert formats.age(0) == "–"
    assert formats.age(61) == "1m1s"
