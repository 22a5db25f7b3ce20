"""The ``eoclient`` command against Google's Pub/Sub emulator (``PUBSUB_EMULATOR_HOST``),
as a user of the emulator runs it: the same verbs work unchanged."""

from __future__ import annotations

import pytest

from .support import Eo

pytestmark = pytest.mark.emulator


@pytest.fixture
def on_emulator(emulator: str, project: str) -> Eo:
    return Eo(emulator, project)


def test_admin_verbs_on_the_emulator(on_emulator: Eo) -> None:
    eo = on_emulator
    topic = eo.json("topics", "create", "orders", "--labels", "team=pay")
    assert topic["name"] == f"projects/{eo.project}/topics/orders"
    assert topic["labels"] == {"team": "pay"}
    sub = eo.json(
        "subscriptions",
        "create",
        "billing",
        "--topic",
        "orders",
        "--ack-deadline",
        "30",
        "--enable-message-ordering",
    )
    assert (sub["topic"], sub["ackDeadlineSeconds"], sub["enableMessageOrdering"]) == (
        topic["name"],
        30,
        True,
    )
    assert [t["name"] for t in eo.json("topics", "list")] == [topic["name"]]
    listed = eo.ok("subscriptions", "list").stdout
    assert sub["name"] in listed
    assert eo.json("topics", "list-subscriptions", "orders") == [sub["name"]]
    assert eo.fails("topics", "create", "orders").startswith("eoclient: ALREADY_EXISTS: ")
    assert eo.fails("subscriptions", "describe", "missing").startswith("eoclient: NOT_FOUND: ")
    eo.ok("subscriptions", "delete", "billing")
    assert eo.json("topics", "delete", "orders") == {"name": topic["name"], "deleted": True}


def test_publish_pull_and_tail_on_the_emulator(on_emulator: Eo) -> None:
    eo = on_emulator
    eo.ok("topics", "create", "orders")
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    report = eo.json("publish", "orders", "--attribute", "k=v", input="a\nb\nc\n")
    assert report["published"] == 3
    pulled = eo.json("pull", "billing", "--limit", "1", "--ack")
    assert len(pulled) == 1
    assert pulled[0]["attributes"] == {"k": "v"}
    assert pulled[0]["ackStatus"] == "SUCCESS"
    result = eo.ok("tail", "billing", "--limit", "2")
    rows = result.stdout.splitlines()[1:]
    assert len(rows) == 2
    assert all("ACK SUCCESS" in row for row in rows)
    assert sorted([pulled[0]["data"], *(row.split()[-1] for row in rows)]) == ["a", "b", "c"]
