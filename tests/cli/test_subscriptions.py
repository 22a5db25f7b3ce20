"""``eoclient subscriptions ...`` against the reference server, in tables and in JSON."""

from __future__ import annotations

from .support import Eo


def _setup(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    eo.ok("topics", "create", "dead-letters")


def test_create_with_the_gcloud_flags(eo: Eo) -> None:
    _setup(eo)
    p = eo.project
    created = eo.json(
        "subscriptions",
        "create",
        "billing",
        "--topic",
        "orders",
        "--enable-exactly-once-delivery",
        "--enable-message-ordering",
        "--ack-deadline",
        "30",
        "--message-filter",
        'attributes.kind = "invoice"',
        "--dead-letter-topic",
        "dead-letters",
        "--max-delivery-attempts",
        "7",
        "--min-retry-delay",
        "5s",
        "--max-retry-delay",
        "2m",
        "--retain-acked-messages",
        "--message-retention-duration",
        "2d",
        "--expiration-period",
        "never",
        "--labels",
        "team=pay",
    )
    assert created == {
        "name": f"projects/{p}/subscriptions/billing",
        "topic": f"projects/{p}/topics/orders",
        "ackDeadlineSeconds": 30,
        "retainAckedMessages": True,
        "messageRetentionDuration": "172800s",
        "labels": {"team": "pay"},
        "enableMessageOrdering": True,
        "expirationPolicy": {"ttl": None},
        "filter": 'attributes.kind = "invoice"',
        "deadLetterPolicy": {
            "deadLetterTopic": f"projects/{p}/topics/dead-letters",
            "maxDeliveryAttempts": 7,
        },
        "retryPolicy": {"minimumBackoff": "5s", "maximumBackoff": "120s"},
        "enableExactlyOnceDelivery": True,
        "pushConfig": None,
        "bigqueryConfig": None,
        "cloudStorageConfig": None,
        "messageTransforms": [],
        "detached": False,
        "topicMessageRetentionDuration": None,
        "state": "ACTIVE",
    }
    assert eo.json("subscriptions", "describe", "billing") == created
    table = eo.ok("subscriptions", "describe", "billing").stdout
    fields = {line[:24].strip(): line[24:].strip() for line in table.splitlines() if line.strip()}
    assert fields["exactly-once delivery"] == "yes"
    assert fields["dead letter"] == f"projects/{p}/topics/dead-letters after 7 attempts"
    assert fields["retry"] == "backoff 5s..2m"
    assert fields["expiration"] == "never"
    assert fields["message retention"] == "2d"


def test_defaults_and_the_topic_of_another_project(eo: Eo) -> None:
    eo.ok("topics", "create", "projects/shared-1/topics/feed")
    created = eo.json(
        "subscriptions",
        "create",
        "reader",
        "--topic",
        "feed",
        "--topic-project",
        "shared-1",
        "--expiration-period",
        "8d",
    )
    assert created["topic"] == "projects/shared-1/topics/feed"
    assert created["expirationPolicy"] == {"ttl": "691200s"}
    assert created["deadLetterPolicy"] is None
    assert created["retryPolicy"] is None
    assert created["enableExactlyOnceDelivery"] is False


def test_create_in_a_table(eo: Eo) -> None:
    _setup(eo)
    result = eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    assert result.stderr.strip() == (
        f"created subscription projects/{eo.project}/subscriptions/billing"
    )
    fields = {line[:24].strip(): line[24:].strip() for line in result.stdout.splitlines()}
    assert fields["topic"] == f"projects/{eo.project}/topics/orders"
    assert fields["exactly-once delivery"] == "no"
    assert fields["retry"] == "redeliver at once"


def test_list_in_both_forms(eo: Eo) -> None:
    _setup(eo)
    eo.ok(
        "subscriptions", "create", "billing", "--topic", "orders", "--enable-exactly-once-delivery"
    )
    eo.ok("subscriptions", "create", "audit", "--topic", "orders")
    listed = eo.json("subscriptions", "list")
    assert [s["name"].rsplit("/", 1)[1] for s in listed] == ["audit", "billing"]
    rows = eo.ok("subscriptions", "list").stdout.splitlines()
    assert rows[0].split()[:3] == ["NAME", "TOPIC", "ACK"]
    assert rows[3].split()[:5] == [
        f"projects/{eo.project}/subscriptions/billing",
        f"projects/{eo.project}/topics/orders",
        "60s",  # the exactly-once default deadline
        "yes",
        "no",
    ]


def test_update_keeps_the_rest_of_a_policy(eo: Eo) -> None:
    _setup(eo)
    eo.ok(
        "subscriptions",
        "create",
        "billing",
        "--topic",
        "orders",
        "--dead-letter-topic",
        "dead-letters",
        "--min-retry-delay",
        "5s",
        "--labels",
        "a=1",
    )
    updated = eo.json(
        "subscriptions",
        "update",
        "billing",
        "--max-delivery-attempts",
        "9",
        "--max-retry-delay",
        "1m",
        "--update-labels",
        "b=2",
        "--ack-deadline",
        "45",
        "--enable-exactly-once-delivery",
        "--retain-acked-messages",
    )
    assert updated["deadLetterPolicy"] == {
        "deadLetterTopic": f"projects/{eo.project}/topics/dead-letters",
        "maxDeliveryAttempts": 9,
    }
    assert updated["retryPolicy"] == {"minimumBackoff": "5s", "maximumBackoff": "60s"}
    assert updated["labels"] == {"a": "1", "b": "2"}
    assert updated["ackDeadlineSeconds"] == 45
    assert updated["enableExactlyOnceDelivery"] is True
    assert updated["retainAckedMessages"] is True
    updated = eo.json(
        "subscriptions",
        "update",
        "billing",
        "--clear-dead-letter-policy",
        "--clear-retry-policy",
        "--no-enable-exactly-once-delivery",
        "--no-retain-acked-messages",
        "--expiration-period",
        "8d",
    )
    assert updated["deadLetterPolicy"] is None
    assert updated["retryPolicy"] is None
    assert updated["enableExactlyOnceDelivery"] is False
    assert updated["retainAckedMessages"] is False
    assert updated["expirationPolicy"] == {"ttl": "691200s"}
    assert updated["ackDeadlineSeconds"] == 45  # untouched
    table = eo.ok("subscriptions", "update", "billing", "--ack-deadline", "20")
    assert "updated subscription" in table.stderr
    assert "20s" in table.stdout


def test_update_refusals(eo: Eo) -> None:
    _setup(eo)
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    assert "nothing to update" in eo.fails("subscriptions", "update", "billing", code=2)
    line = eo.fails("subscriptions", "update", "billing", "--max-delivery-attempts", "6")
    assert "the subscription has no dead-letter policy" in line
    line = eo.fails(
        "subscriptions",
        "update",
        "billing",
        "--clear-retry-policy",
        "--min-retry-delay",
        "1s",
        code=2,
    )
    assert "--clear-retry-policy contradicts" in line
    line = eo.fails(
        "subscriptions",
        "create",
        "other",
        "--topic",
        "orders",
        "--max-delivery-attempts",
        "6",
        code=2,
    )
    assert "--max-delivery-attempts needs --dead-letter-topic" in line
    # The service's own range check, its message unchanged.
    line = eo.fails("subscriptions", "update", "billing", "--ack-deadline", "5")
    assert line.startswith("eoclient: INVALID_ARGUMENT: ")


def test_detach_and_delete(eo: Eo) -> None:
    _setup(eo)
    eo.ok("subscriptions", "create", "billing", "--topic", "orders")
    eo.ok("subscriptions", "create", "audit", "--topic", "orders")
    name = f"projects/{eo.project}/subscriptions/billing"
    assert eo.json("subscriptions", "detach", "billing") == {"name": name, "detached": True}
    assert eo.json("subscriptions", "describe", "billing")["detached"] is True
    audit = f"projects/{eo.project}/subscriptions/audit"
    assert eo.ok("subscriptions", "detach", "audit").stdout.strip() == (
        f"detached subscription {audit}"
    )
    assert eo.json("subscriptions", "delete", "billing") == {"name": name, "deleted": True}
    assert eo.ok("subscriptions", "delete", "audit").stdout.strip() == (
        f"deleted subscription {audit}"
    )
    assert eo.json("subscriptions", "list") == []
    assert eo.fails("subscriptions", "delete", "billing").startswith("eoclient: NOT_FOUND")
    line = eo.fails("subscriptions", "create", "late", "--topic", "missing")
    assert line.startswith("eoclient: NOT_FOUND")
