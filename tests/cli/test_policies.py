"""The broker-policy verbs against the reference server: skip-messages, retention,
backlog quotas, message TTL, policies views, and seek's warning, in tables and JSON;
bad values are one-line usage errors naming the flag; Pulsar's units and conventions
(-1 infinite, 0 disables)."""

from __future__ import annotations

import datetime

import pytest

from eoclient.cli.errors import CliError
from eoclient.cli.policy_values import format_size, parse_size
from eoclient.cli.values import parse_duration, parse_duration_or_forever

from .support import Eo

HOUR = datetime.timedelta(hours=1)


@pytest.fixture
def orders(eo: Eo) -> Eo:
    """Topic ``orders`` with the exactly-once subscription ``billing``."""
    eo.ok("topics", "create", "orders")
    eo.ok(
        "subscriptions", "create", "billing", "--topic", "orders", "--enable-exactly-once-delivery"
    )
    return eo


# ---------------------------------------------------------------- values


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("120", datetime.timedelta(seconds=120)),
        ("100m", datetime.timedelta(minutes=100)),
        ("3h", 3 * HOUR),
        ("2d", datetime.timedelta(days=2)),
        ("5w", datetime.timedelta(weeks=5)),
        ("1y", datetime.timedelta(days=365)),
        ("0", datetime.timedelta(0)),
        ("-1", None),
    ],
)
def test_pulsar_times(text: str, value: datetime.timedelta | None) -> None:
    assert parse_duration_or_forever(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("10M", 10 * 2**20), ("16g", 16 * 2**30), ("3T", 3 * 2**40), ("-1", None)],
)
def test_pulsar_sizes(text: str, value: int | None) -> None:
    assert parse_size(text) == value
    if value is not None:
        assert parse_size(format_size(value)) == value


@pytest.mark.parametrize("text", ["", "3x", "-2", "h", "10 G"])
def test_bad_times_and_sizes_are_refused(text: str) -> None:
    with pytest.raises(CliError):
        parse_duration_or_forever(text)
    with pytest.raises(CliError):
        parse_size(text)
    with pytest.raises(CliError, match="not allowed here"):
        parse_duration("-1")  # only retention takes -1


# ---------------------------------------------------------------- skip


def test_skip_messages_reports_each_id(orders: Eo) -> None:
    first, second = orders.json("publish", "orders", "poison", "fine")["messageIds"]
    got = orders.json(
        "subscriptions", "skip-messages", "billing", "--message-id", first, "--message-id", "424242"
    )
    assert got == [
        {"messageId": first, "outcome": "skipped"},
        {"messageId": "424242", "outcome": "not_found"},
    ]
    table = orders.ok("subscriptions", "skip-messages", "billing", "--message-id", first)
    header, _, row = table.stdout.splitlines()
    assert header.split() == ["MESSAGE", "ID", "OUTCOME"]
    assert row.split() == [first, "already_acknowledged"]
    pulled = orders.json("pull", "billing", "--limit", "5", "--ack")
    assert [m["messageId"] for m in pulled] == [second]
    missing = orders.ok("subscriptions", "skip-messages", "billing", "--message-id", "x")
    topic = f"projects/{orders.project}/topics/orders"
    assert (
        f"1 of the ids are no message of {topic} (never issued, or published to another "
        "topic)" in missing.stderr
    )
    # An id of another topic is told apart from an acknowledged one.
    orders.ok("topics", "create", "elsewhere")
    [other] = orders.json("publish", "elsewhere", "not billing's")["messageIds"]
    got = orders.json("subscriptions", "skip-messages", "billing", "--message-id", other)
    assert got == [{"messageId": other, "outcome": "not_found"}]
    line = orders.fails("subscriptions", "skip-messages", "billing", code=2)
    assert "--message-id" in line


# ---------------------------------------------------------------- topics


def test_topic_policies_set_show_and_remove(orders: Eo) -> None:
    topic = f"projects/{orders.project}/topics/orders"
    got = orders.json("topics", "set-retention", "orders", "--time", "3h", "--size", "10G")
    assert got["retention"] == {"timeSeconds": 10800, "sizeBytes": 10 * 2**30}
    got = orders.json(
        "topics",
        "set-backlog-quota",
        "orders",
        "--limit",
        "2G",
        "--limit-time",
        "1h",
        "--policy",
        "producer_exception",
    )
    assert got["backlogQuota"] == {
        "limitBytes": 2 * 2**30,
        "limitAge": "3600s",
        "action": "PRODUCER_EXCEPTION",
        "holdTimeout": "30s",
    }
    got = orders.json("topics", "set-message-ttl", "orders", "--ttl", "120")
    assert got["messageTtl"] == "120s"

    shown = orders.json("topics", "policies", "orders")
    assert shown["topic"] == topic
    assert shown["counters"] == {
        "heldPublishes": 0,
        "heldThenRefused": 0,
        "refusedPublishes": 0,
        "retainedMessages": 0,
        "retainedBytes": 0,
        "oldestRetainedPublishTime": None,
    }
    table = orders.ok("topics", "policies", "orders").stdout
    assert "time 3h, size 10G" in table
    assert "size 2G, age 1h: producer_exception" in table
    assert "message ttl" in table
    assert "2m" in table

    infinite = orders.json("topics", "set-retention", "orders", "--time", "-1", "--size", "-1")
    assert infinite["retention"] == {"timeSeconds": -1, "sizeBytes": -1}
    assert orders.json("topics", "remove-retention", "orders")["retention"] is None
    assert orders.json("topics", "remove-backlog-quota", "orders")["backlogQuota"] is None
    assert orders.json("topics", "set-message-ttl", "orders", "--ttl", "0")["messageTtl"] is None
    orders.json("topics", "set-message-ttl", "orders", "--ttl", "5m")
    assert orders.json("topics", "remove-message-ttl", "orders")["messageTtl"] is None
    none = orders.json("topics", "set-retention", "orders", "--time", "0", "--size", "0")
    assert none["retention"] is None


def test_policy_refusals_are_one_line(orders: Eo) -> None:
    line = orders.fails("topics", "set-retention", "orders", "--time", "3h", "--size", "0")
    assert line.startswith("eoclient: INVALID_ARGUMENT: retention time 10800 s with size 0")
    line = orders.fails("topics", "set-retention", "orders", "--time", "3h", code=2)
    assert "--size" in line
    line = orders.fails("topics", "set-retention", "orders", "--time", "3q", "--size", "1", code=2)
    assert "invalid duration '3q'" in line
    line = orders.fails("topics", "set-backlog-quota", "orders", code=2)
    assert "pass --limit, --limit-time or both" in line
    line = orders.fails(
        "topics", "set-backlog-quota", "orders", "--limit", "1", "-p", "hold", code=2
    )
    assert "'hold' is not one of" in line
    line = orders.fails(
        "topics",
        "set-backlog-quota",
        "orders",
        "--limit",
        "1",
        "--policy",
        "producer_exception",
        "--hold-timeout",
        "5s",
        code=2,
    )
    assert "--hold-timeout applies to" in line
    line = orders.fails("topics", "policies", "missing")
    assert line.startswith("eoclient: NOT_FOUND: ")


def test_a_held_publish_is_refused_with_the_quota_in_one_line(orders: Eo) -> None:
    orders.ok("topics", "set-backlog-quota", "orders", "--limit", "1", "--hold-timeout", "0.1s")
    orders.ok("publish", "orders", "over")
    policies = orders.json("topics", "policies", "orders")
    assert policies["backlogQuota"]["holdTimeout"] == "0.100s"
    table = orders.ok("topics", "policies", "orders").stdout
    assert "producer_request_hold (hold 0.1s)" in table


# ---------------------------------------------------------------- subscriptions


def test_subscription_ttl_and_policies(orders: Eo) -> None:
    sub = f"projects/{orders.project}/subscriptions/billing"
    orders.ok("topics", "set-message-ttl", "orders", "--ttl", "10m")
    shown = orders.json("subscriptions", "policies", "billing")
    assert shown["messageTtl"] is None
    assert shown["effectiveMessageTtl"] == "600s"
    assert "10m (the topic's)" in orders.ok("subscriptions", "policies", "billing").stdout
    got = orders.json("subscriptions", "set-message-ttl", "billing", "--ttl", "1m")
    assert got == {"subscription": sub, "messageTtl": "60s", "effectiveMessageTtl": "60s"}
    orders.ok("publish", "orders", "a")
    counters = orders.json("subscriptions", "policies", "billing")["counters"]
    assert counters["backlogMessages"] == 1
    assert counters["oldestUnackedPublishTime"].endswith("Z")
    back = orders.json("subscriptions", "remove-message-ttl", "billing")
    assert back["messageTtl"] is None
    assert (
        orders.json("subscriptions", "set-message-ttl", "billing", "--ttl", "0")[
            "effectiveMessageTtl"
        ]
        == "600s"
    )


# ---------------------------------------------------------------- seek


def test_seek_warns_when_the_time_is_older_than_what_is_retained(orders: Eo) -> None:
    orders.ok("topics", "set-retention", "orders", "--time", "1h", "--size", "-1")
    orders.ok("publish", "orders", "a")
    orders.ok("pull", "billing", "--ack")
    result = orders.ok("seek", "billing", "--time", "2000-01-01T00:00:00Z")
    assert "warning: 2000-01-01T00:00:00Z is older than anything retained" in result.stderr
    seeked = orders.json("seek", "billing", "--time", "2000-01-01T00:00:00Z")
    assert seeked["complete"] is False
    assert seeked["replayableFrom"].endswith("Z")
    assert [m["data"] for m in orders.json("pull", "billing", "--ack")] == ["a"]
    inside = orders.json("seek", "billing", "--time", "now")
    assert inside["complete"] is True
    assert "warning" not in orders.ok("seek", "billing", "--time", "now").stderr


def test_seek_says_when_nothing_is_retained(eo: Eo) -> None:
    eo.ok("topics", "create", "plain")
    eo.ok("subscriptions", "create", "reader", "--topic", "plain")
    result = eo.ok("seek", "reader", "--time", "-1h")
    assert "warning: nothing is retained to replay" in result.stderr


# ---------------------------------------------------------------- elsewhere


@pytest.mark.emulator
def test_on_the_emulator_policies_say_what_is_missing_and_seek_works_plainly(
    emulator: str, project: str
) -> None:
    eo = Eo(emulator, project)
    eo.ok("topics", "create", "orders")
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    line = eo.fails("topics", "set-message-ttl", "orders", "--ttl", "60")
    assert line == (
        f"eoclient: {emulator} does not serve eoclient's broker policies: they need "
        "eoclient's reference server (eoclient serve)"
    )
    seeked = eo.json("seek", "billing", "--time", "-1h")
    assert (seeked["replayableFrom"], seeked["complete"]) == (None, None)
