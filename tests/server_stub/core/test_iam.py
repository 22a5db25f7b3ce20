"""Broker core: IAM policies (core/iam.py) — etags and concurrent writes, versions and
conditions, roles and principals refused with a clear INVALID_ARGUMENT (and nothing
stored), TestIamPermissions from the bindings, policies forgotten with their resource,
and kept across a restart of a durable store."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient._clock import FakeClock
from eoclient.errors import Aborted, InvalidArgument, NotFound
from eoclient.server_stub.core import (
    Broker,
    ExpirationPolicy,
    SubscriptionConfig,
    TopicConfig,
    iam,
)
from eoclient.server_stub.core.iam import Binding, Condition, Policy
from eoclient.server_stub.storage.memory import MemoryStore
from eoclient.server_stub.storage.sqlite import SqliteStore

from .support import SUB, TOPIC, Env

EDITOR = Binding("roles/pubsub.editor", ("domain:google.com",))
VIEWER = Binding("roles/pubsub.viewer", ("group:cloud-logs@google.com",))


def test_a_new_resource_has_the_empty_policy_with_the_services_etag() -> None:
    env = Env()
    policy = env.broker.iam.get(TOPIC)
    assert policy == Policy(etag=b"\x00\x20\x01")  # "ACAB"


def test_set_then_get_round_trips_and_each_write_has_a_new_etag() -> None:
    env = Env()
    first = env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR, VIEWER)))
    assert first.bindings == (EDITOR, VIEWER)
    assert first.version == 1  # 0 is stored as 1
    assert len(first.etag) == 8
    assert env.broker.iam.get(TOPIC) == first
    second = env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR, VIEWER)))
    assert second.etag not in (first.etag, iam.EMPTY_POLICY_ETAG)


def test_a_stale_etag_is_aborted_and_changes_nothing() -> None:
    env = Env()
    read = env.broker.iam.get(TOPIC)
    env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR,), etag=read.etag))
    current = env.broker.iam.get(TOPIC)
    with pytest.raises(Aborted, match="concurrent policy changes"):
        env.broker.iam.set(TOPIC, Policy(bindings=(VIEWER,), etag=read.etag))
    assert env.broker.iam.get(TOPIC) == current
    # The current etag (or none) is accepted.
    env.broker.iam.set(TOPIC, Policy(bindings=(VIEWER,), etag=current.etag))
    env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR,)))


def test_bindings_are_merged_deduplicated_and_empty_ones_dropped() -> None:
    env = Env()
    stored = env.broker.iam.set(
        TOPIC,
        Policy(
            bindings=(
                Binding("roles/pubsub.publisher", ("user:a@x.com", "user:a@x.com")),
                Binding("roles/pubsub.viewer", ()),
                Binding("roles/pubsub.publisher", ("user:b@x.com", "user:a@x.com")),
            )
        ),
    )
    assert stored.bindings == (Binding("roles/pubsub.publisher", ("user:a@x.com", "user:b@x.com")),)


@pytest.mark.parametrize(
    ("binding", "version", "message"),
    [
        (Binding("roles/storage.admin", ("user:a@x.com",)), 1, "Role roles/storage.admin"),
        (Binding("pubsub.editor", ("user:a@x.com",)), 1, "is not supported"),
        (Binding("roles/pubsub.viewer", ("alice",)), 1, "Invalid principal 'alice'"),
        (Binding("roles/pubsub.viewer", ("user:",)), 1, "Invalid principal"),
        (Binding("roles/pubsub.viewer", ("user:a@x.com",)), 2, "version 2"),
        (
            Binding("roles/pubsub.viewer", ("user:a@x.com",), Condition("true")),
            1,
            "needs policy version 3",
        ),
        (
            Binding("roles/pubsub.viewer", ("user:a@x.com",), Condition(" ")),
            3,
            "has no expression",
        ),
    ],
)
def test_bad_policies_are_refused_and_nothing_is_stored(
    binding: Binding, version: int, message: str
) -> None:
    env = Env()
    with pytest.raises(InvalidArgument, match=message):
        env.broker.iam.set(TOPIC, Policy(version=version, bindings=(binding,)))
    assert env.broker.iam.get(TOPIC).etag == iam.EMPTY_POLICY_ETAG


def test_custom_roles_and_every_member_kind_are_accepted() -> None:
    env = Env()
    members = (
        "user:a@x.com",
        "serviceAccount:sa@p.iam.gserviceaccount.com",
        "group:g@x.com",
        "domain:x.com",
        "deleted:user:a@x.com?uid=123",
        "principal://iam.googleapis.com/locations/global/workforcePools/p/subject/s",
        "allUsers",
        "allAuthenticatedUsers",
    )
    stored = env.broker.iam.set(
        TOPIC, Policy(bindings=(Binding("projects/p1/roles/myRole", members),))
    )
    assert stored.bindings[0].members == members


def test_conditions_need_version_3_and_are_hidden_from_version_1_readers() -> None:
    env = Env()
    conditional = Binding(
        "roles/pubsub.subscriber", ("user:a@x.com",), Condition("request.time < x", "until")
    )
    stored = env.broker.iam.set(TOPIC, Policy(version=3, bindings=(conditional, EDITOR)))
    assert stored.version == 3
    assert env.broker.iam.get(TOPIC, 3) == stored
    old_reader = env.broker.iam.get(TOPIC, 1)
    assert old_reader.version == 1
    assert old_reader.bindings[1] == EDITOR
    hidden = old_reader.bindings[0]
    assert hidden.role.startswith("roles/pubsub.subscriber_withcond_")
    assert hidden.condition is None
    with pytest.raises(InvalidArgument, match="requested_policy_version 2"):
        env.broker.iam.get(TOPIC, 2)


def test_update_mask_chooses_the_fields_replaced() -> None:
    env = Env()
    env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR,)))
    audit = (iam.AuditConfig("allServices", (iam.AuditLogConfig(1, ("user:a@x.com",)),)),)
    stored = env.broker.iam.set(
        TOPIC, Policy(bindings=(VIEWER,), audit_configs=audit), ["audit_configs"]
    )
    assert stored.bindings == (EDITOR,)
    assert stored.audit_configs == audit
    with pytest.raises(InvalidArgument, match="update_mask path 'members'"):
        env.broker.iam.set(TOPIC, Policy(), ["members"])


def test_every_resource_kind_and_missing_or_malformed_resources() -> None:
    env = Env()
    env.subscribe()
    env.broker.snapshots.create("projects/p1/snapshots/snap-a", SUB)
    for resource in (TOPIC, SUB, "projects/p1/snapshots/snap-a"):
        stored = env.broker.iam.set(resource, Policy(bindings=(EDITOR,)))
        assert env.broker.iam.get(resource) == stored
    with pytest.raises(NotFound, match=r"Resource not found \(resource=nope\)"):
        env.broker.iam.get("projects/p1/topics/nope")
    with pytest.raises(NotFound):
        env.broker.iam.set("projects/p1/subscriptions/nope", Policy())
    with pytest.raises(InvalidArgument, match="Invalid resource name"):
        env.broker.iam.get("projects/p1/buckets/b")


def test_a_deleted_resource_takes_its_policy_with_it() -> None:
    env = Env()
    env.subscribe()
    env.broker.iam.set(TOPIC, Policy(bindings=(EDITOR,)))
    env.broker.iam.set(SUB, Policy(bindings=(EDITOR,)))
    env.broker.topics.delete(TOPIC)
    env.broker.subscriptions.delete(SUB)
    env.broker.topics.create(TopicConfig(TOPIC))
    env.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    assert env.broker.iam.get(TOPIC).bindings == ()
    assert env.broker.iam.get(SUB).bindings == ()


def test_an_expired_subscription_takes_its_policy_with_it() -> None:
    env = Env()
    env.subscribe(expiration_policy=ExpirationPolicy(86400.0), message_retention_duration=600.0)
    env.broker.iam.set(SUB, Policy(bindings=(EDITOR,)))
    env.advance(86401)
    env.broker.tick()
    env.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    assert env.broker.iam.get(SUB).bindings == ()


@pytest.mark.parametrize(
    ("role", "member", "expected"),
    [
        ("roles/pubsub.publisher", "user:a@x.com", ["pubsub.topics.publish"]),
        ("roles/pubsub.viewer", "user:a@x.com", ["pubsub.topics.get"]),
        ("roles/pubsub.subscriber", "user:a@x.com", ["pubsub.topics.attachSubscription"]),
        (
            "roles/pubsub.admin",
            "user:a@x.com",
            [
                "pubsub.topics.publish",
                "pubsub.topics.get",
                "pubsub.topics.setIamPolicy",
                "pubsub.topics.attachSubscription",
            ],
        ),
        (
            "roles/pubsub.editor",
            "user:a@x.com",
            ["pubsub.topics.publish", "pubsub.topics.get", "pubsub.topics.attachSubscription"],
        ),
        ("roles/pubsub.publisher", "user:other@x.com", []),
        ("projects/p1/roles/custom", "user:a@x.com", []),
    ],
)
def test_test_iam_permissions_answers_from_the_bindings(
    role: str, member: str, expected: list[str]
) -> None:
    env = Env()
    env.broker.iam.set(TOPIC, Policy(bindings=(Binding(role, (member,)),)))
    asked = [
        "pubsub.topics.publish",
        "pubsub.topics.get",
        "pubsub.topics.setIamPolicy",
        "pubsub.topics.attachSubscription",
    ]
    held = env.broker.iam.test(TOPIC, asked, "user:a@x.com")
    assert sorted(held) == sorted(expected)


def test_public_members_and_the_local_administrator() -> None:
    env = Env()
    env.broker.iam.set(TOPIC, Policy(bindings=(Binding("roles/pubsub.publisher", ("allUsers",)),)))
    assert env.broker.iam.test(
        TOPIC, ["pubsub.topics.publish", "pubsub.topics.delete"], "user:anyone@x.com"
    ) == ["pubsub.topics.publish"]
    # No identity: the local administrator holds every permission of the kind asked.
    asked = ["pubsub.topics.delete", "pubsub.topics.publish", "pubsub.topics.delete"]
    assert env.broker.iam.test(TOPIC, asked) == [
        "pubsub.topics.delete",
        "pubsub.topics.publish",
    ]
    for wrong in ("pubsub.subscriptions.consume", "pubsub.topics.*", "storage.buckets.get"):
        with pytest.raises(InvalidArgument, match="is not valid for this resource"):
            env.broker.iam.test(TOPIC, [wrong])


def test_policies_survive_a_restart_of_a_durable_store(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SqliteStore(tmp_path)
    broker = Broker(clock, store=store)
    broker.topics.create(TopicConfig(TOPIC))
    stored = broker.iam.set(TOPIC, Policy(version=3, bindings=(EDITOR, VIEWER)))
    store.commit()
    store.close()
    store = SqliteStore(tmp_path)
    try:
        again = Broker(clock, store=store)
        assert again.iam.get(TOPIC, 3) == stored
        # The etag sequence goes on: a write after the restart gets a fresh etag.
        after = again.iam.set(TOPIC, Policy(bindings=(EDITOR,), etag=stored.etag))
        assert after.etag != stored.etag
        again.topics.delete(TOPIC)
        store.commit()
    finally:
        store.close()
    store = SqliteStore(tmp_path)
    try:
        assert not [k for k in store.load().documents if k[0] == iam.DOCUMENT_KIND]
    finally:
        store.close()


_members = st.sampled_from(["user:a@x.com", "group:g@x.com", "allUsers", "domain:x.com"])
_roles = st.sampled_from(sorted(iam.ROLE_PERMISSIONS))
_conditions = st.none() | st.builds(Condition, st.text(min_size=1).filter(str.strip))
_bindings = st.builds(Binding, _roles, st.lists(_members, max_size=3).map(tuple), _conditions)


@given(st.lists(_bindings, max_size=6))
def test_stored_policies_encode_and_decode_unchanged(bindings: list[Binding]) -> None:
    room = iam.IamPolicies(MemoryStore(), exists=lambda resource: True)
    stored = room.set(TOPIC, Policy(version=3, bindings=tuple(bindings)))
    assert iam.decode(iam.encode(7, stored)) == (7, stored)
    # Normalised: one binding per (role, condition), no duplicate or empty member lists.
    keys = [(b.role, b.condition) for b in stored.bindings]
    assert len(keys) == len(set(keys))
    assert all(b.members and len(set(b.members)) == len(b.members) for b in stored.bindings)
