"""``eoclient topics ...`` against the reference server, in tables and in JSON."""

from __future__ import annotations

from .support import Eo


def test_create_describe_list_delete_in_json(eo: Eo) -> None:
    created = eo.json(
        "topics",
        "create",
        "orders",
        "--labels",
        "team=pay,env=dev",
        "--message-retention-duration",
        "1h",
    )
    name = f"projects/{eo.project}/topics/orders"
    assert created == {
        "name": name,
        "labels": {"env": "dev", "team": "pay"},
        "messageRetentionDuration": "3600s",
        "kmsKeyName": "",
        "messageTransforms": [],
        "ingestionDataSourceSettings": None,
        "state": "ACTIVE",
    }
    assert eo.json("topics", "describe", name) == created
    eo.ok("topics", "create", "audit")
    listed = eo.json("topics", "list")
    assert [t["name"] for t in listed] == [f"projects/{eo.project}/topics/audit", name]
    assert eo.json("topics", "delete", "orders") == {"name": name, "deleted": True}
    assert [t["name"] for t in eo.json("topics", "list")] == [f"projects/{eo.project}/topics/audit"]


def test_tables_for_people(eo: Eo) -> None:
    result = eo.ok("topics", "create", "orders", "--labels", "team=pay")
    assert "created topic" in result.stderr
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if line.strip())
    assert rows["name"].strip() == f"projects/{eo.project}/topics/orders"
    assert rows["labels"].strip() == "team=pay"
    listed = eo.ok("topics", "list").stdout.splitlines()
    assert listed[0].split() == ["NAME", "RETENTION", "LABELS"]
    assert listed[2].split() == [f"projects/{eo.project}/topics/orders", "team=pay"]
    described = eo.ok("topics", "describe", "orders").stdout
    assert "none (subscriptions decide)" in described
    deleted = eo.ok("topics", "delete", "orders")
    assert deleted.stdout.strip() == f"deleted topic projects/{eo.project}/topics/orders"


def test_an_empty_list(eo: Eo) -> None:
    result = eo.ok("topics", "list")
    assert result.stdout == ""
    assert result.stderr.strip() == f"no topics in projects/{eo.project}"
    assert eo.json("topics", "list") == []


def test_update_changes_only_what_the_flags_name(eo: Eo) -> None:
    eo.ok(
        "topics",
        "create",
        "orders",
        "--labels",
        "a=1,b=2",
        "--message-retention-duration",
        "1h",
    )
    updated = eo.json(
        "topics", "update", "orders", "--update-labels", "c=3", "--remove-labels", "a"
    )
    assert updated["labels"] == {"b": "2", "c": "3"}
    assert updated["messageRetentionDuration"] == "3600s"  # untouched
    updated = eo.json("topics", "update", "orders", "--clear-message-retention-duration")
    assert updated["messageRetentionDuration"] is None
    assert updated["labels"] == {"b": "2", "c": "3"}
    updated = eo.json(
        "topics", "update", "orders", "--clear-labels", "--message-retention-duration", "2d"
    )
    assert updated["labels"] == {}
    assert updated["messageRetentionDuration"] == "172800s"
    table = eo.ok("topics", "update", "orders", "--update-labels", "z=9")
    assert "updated topic" in table.stderr
    assert "z=9" in table.stdout


def test_update_without_flags_is_a_usage_error(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    assert "nothing to update" in eo.fails("topics", "update", "orders", code=2)
    line = eo.fails(
        "topics",
        "update",
        "orders",
        "--message-retention-duration",
        "1h",
        "--clear-message-retention-duration",
        code=2,
    )
    assert "contradict" in line


def test_subscriptions_and_snapshots_of_a_topic(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    assert eo.json("topics", "list-subscriptions", "orders") == []
    assert "no subscriptions of" in eo.ok("topics", "list-subscriptions", "orders").stderr
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    eo.ok("snapshots", "create", "before", "--subscription", "billing")
    sub = f"projects/{eo.project}/subscriptions/billing"
    snap = f"projects/{eo.project}/snapshots/before"
    assert eo.json("topics", "list-subscriptions", "orders") == [sub]
    assert eo.json("topics", "list-snapshots", "orders") == [snap]
    table = eo.ok("topics", "list-subscriptions", "orders").stdout.split()
    assert table == ["NAME", table[1], sub]
    assert eo.ok("topics", "list-snapshots", "orders").stdout.split()[-1] == snap


def test_service_errors_are_one_line(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    assert (
        eo.fails("topics", "create", "orders") == "eoclient: ALREADY_EXISTS: Topic already exists"
    )
    assert eo.fails("topics", "describe", "missing").startswith("eoclient: NOT_FOUND: ")
    assert eo.fails("topics", "delete", "missing").startswith("eoclient: NOT_FOUND: ")
    # The server's own rule for ids (at least 3 characters, a letter first).
    assert "INVALID_ARGUMENT" in eo.fails("topics", "create", "x")
