"""One duration grammar for every flag that takes a duration (values.py): s, m, h, d, w and
y everywhere, decimals and chains; -1 only where forever makes sense, refused elsewhere
with a line that says so."""

from __future__ import annotations

from .support import Eo


def test_every_duration_flag_reads_weeks_and_the_same_forms(eo: Eo) -> None:
    eo.ok("topics", "create", "weekly", "--message-retention-duration", "1w")
    topic = eo.json("topics", "describe", "weekly")
    assert topic["messageRetentionDuration"] == "604800s"
    eo.ok(
        "subscriptions",
        "create",
        "weekly-sub",
        "--topic",
        "weekly",
        "--message-retention-duration",
        "1w",
        "--min-retry-delay",
        "0.5m",
        "--max-retry-delay",
        "0.1h",
        "--expiration-period",
        "5w",
    )
    sub = eo.json("subscriptions", "describe", "weekly-sub")
    assert sub["messageRetentionDuration"] == "604800s"
    assert sub["retryPolicy"] == {"minimumBackoff": "30s", "maximumBackoff": "360s"}
    assert sub["expirationPolicy"] == {"ttl": "3024000s"}
    eo.ok("topics", "set-backlog-quota", "weekly", "--limit-time", "1w", "--hold-timeout", "1m")
    eo.ok("topics", "set-message-ttl", "weekly", "--ttl", "1w2d")
    policies = eo.json("topics", "policies", "weekly")
    assert policies["backlogQuota"]["limitAge"] == "604800s"
    assert policies["messageTtl"] == "777600s"
    eo.ok("seek", "weekly-sub", "--time", "-1w")


def test_minus_one_is_forever_only_where_forever_makes_sense(eo: Eo) -> None:
    eo.ok("topics", "create", "kept")
    eo.ok("topics", "set-retention", "kept", "--time", "-1", "--size", "-1")
    eo.ok("subscriptions", "create", "kept-sub", "--topic", "kept", "--expiration-period", "-1")
    assert eo.json("subscriptions", "describe", "kept-sub")["expirationPolicy"] == {"ttl": None}
    for args in (
        ("topics", "create", "never", "--message-retention-duration", "-1"),
        ("topics", "set-message-ttl", "kept", "--ttl", "-1"),
        ("topics", "set-backlog-quota", "kept", "--limit-time", "-1"),
    ):
        line = eo.fails(*args, code=2)
        assert "-1 (forever) is not allowed here" in line, args
