"""``eoclient snapshots ...`` against the reference server, in tables and in JSON."""

from __future__ import annotations

from .support import Eo


def test_snapshot_lifecycle(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    p = eo.project
    created = eo.json(
        "snapshots", "create", "before", "--subscription", "billing", "--labels", "why=release"
    )
    assert created["name"] == f"projects/{p}/snapshots/before"
    assert created["topic"] == f"projects/{p}/topics/orders"
    assert created["labels"] == {"why": "release"}
    assert created["expireTime"].endswith("Z")
    assert eo.json("snapshots", "describe", "before") == created
    table = eo.ok("snapshots", "describe", "before").stdout
    assert f"projects/{p}/snapshots/before" in table
    assert "why=release" in table
    after = eo.ok(
        "snapshots",
        "create",
        f"projects/{p}/snapshots/after",
        "--subscription",
        f"projects/{p}/subscriptions/billing",
    )
    assert after.stderr.strip() == f"created snapshot projects/{p}/snapshots/after"
    assert after.stdout.split()[:4] == [
        "name",
        f"projects/{p}/snapshots/after",
        "topic",
        f"projects/{p}/topics/orders",
    ]
    assert [s["name"] for s in eo.json("snapshots", "list")] == [
        f"projects/{p}/snapshots/after",
        created["name"],
    ]
    rows = eo.ok("snapshots", "list").stdout.splitlines()
    assert rows[0].split() == ["NAME", "TOPIC", "EXPIRES", "LABELS"]
    assert rows[3].split()[0] == created["name"]
    updated = eo.json(
        "snapshots", "update", "before", "--update-labels", "by=ops", "--remove-labels", "why"
    )
    assert updated["labels"] == {"by": "ops"}
    assert updated["expireTime"] == created["expireTime"]
    assert "updated snapshot" in eo.ok("snapshots", "update", "before", "--clear-labels").stderr
    assert eo.json("snapshots", "delete", "before") == {"name": created["name"], "deleted": True}
    assert eo.ok("snapshots", "delete", "after").stdout.strip() == (
        f"deleted snapshot projects/{p}/snapshots/after"
    )
    assert eo.json("snapshots", "list") == []
    assert "no snapshots in" in eo.ok("snapshots", "list").stderr


def test_snapshot_errors(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    eo.ok("snapshots", "create", "before", "--subscription", "billing")
    again = eo.fails("snapshots", "create", "before", "--subscription", "billing")
    assert again.startswith("eoclient: ALREADY_EXISTS: ")
    missing = eo.fails("snapshots", "create", "other", "--subscription", "missing")
    assert missing.startswith("eoclient: NOT_FOUND: ")
    assert eo.fails("snapshots", "describe", "missing").startswith("eoclient: NOT_FOUND: ")
    assert "nothing to update" in eo.fails("snapshots", "update", "before", code=2)
    assert "Missing option '--subscription'" in eo.fails("snapshots", "create", "x-snap", code=2)
