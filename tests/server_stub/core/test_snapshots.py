"""Broker core: snapshots, seek (to a time, to a snapshot) and detached subscriptions, on
the fake clock (docs/protocol.md#seek-and-snapshots)."""

from __future__ import annotations

import dataclasses

import pytest

from eoclient.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.storage import MemoryStore

from .support import INVALID, PROJECT, SUB, TOPIC, Env, data, ids

MINUTE = 60.0
HOUR = 3600.0
DAY = 24 * HOUR
SNAP = "projects/p1/snapshots/snap-a"
OTHER_TOPIC = "projects/p1/topics/topic-b"


@pytest.fixture
def env() -> Env:
    return Env()


def pull_and_ack(env: Env, sub: str = SUB) -> list[str]:
    deliveries = env.pull(sub=sub)
    if deliveries:
        assert env.ack(*ids(deliveries), sub=sub).ok
    return data(deliveries)


# ------------------------------------------------------------------ CRUD


def test_create_get_list_delete(env: Env) -> None:
    env.subscribe()
    now = env.clock.now()
    view = env.broker.snapshots.create(SNAP, SUB, {"team": "a"})
    assert (view.name, view.topic, view.labels) == (SNAP, TOPIC, {"team": "a"})
    assert view.expire_time == now + 7 * DAY  # nothing unacked: 7 days from now
    assert env.broker.snapshots.get(SNAP) == view
    assert env.broker.snapshots.list(PROJECT, 0, "").items == (view,)
    assert env.broker.snapshots.list("projects/other", 0, "").items == ()
    assert env.broker.snapshots.list_for_topic(TOPIC, 0, "").items == (SNAP,)
    with pytest.raises(AlreadyExists):
        env.broker.snapshots.create(SNAP, SUB)
    env.broker.snapshots.delete(SNAP)
    with pytest.raises(NotFound):
        env.broker.snapshots.get(SNAP)
    with pytest.raises(NotFound):
        env.broker.snapshots.delete(SNAP)
    assert env.broker.snapshots.list(PROJECT, 0, "").items == ()


def test_create_errors(env: Env) -> None:
    with pytest.raises(NotFound):
        env.broker.snapshots.create(SNAP, "projects/p1/subscriptions/missing")
    with pytest.raises(InvalidArgument):
        env.broker.snapshots.create("projects/p1/snapshots/x", SUB)  # id too short
    with pytest.raises(NotFound):
        env.broker.snapshots.list_for_topic("projects/p1/topics/missing", 0, "")


def test_empty_name_gets_a_server_assigned_one_in_the_subscriptions_project(env: Env) -> None:
    env.subscribe()
    view = env.broker.snapshots.create("", SUB)
    assert view.name.startswith("projects/p1/snapshots/")
    assert env.broker.snapshots.get(view.name) == view


def test_listing_paginates(env: Env) -> None:
    env.subscribe()
    names = [f"projects/p1/snapshots/snap-{i}" for i in range(5)]
    for name in names:
        env.broker.snapshots.create(name, SUB)
    first = env.broker.snapshots.list(PROJECT, 2, "")
    assert [s.name for s in first.items] == names[:2]
    assert first.next_page_token
    rest = env.broker.snapshots.list(PROJECT, 10, first.next_page_token)
    assert [s.name for s in rest.items] == names[2:]
    assert not rest.next_page_token
    topic_page = env.broker.snapshots.list_for_topic(TOPIC, 3, "")
    assert list(topic_page.items) == names[:3]
    assert topic_page.next_page_token


def test_expire_time_is_seven_days_minus_the_age_of_the_oldest_unacked(env: Env) -> None:
    env.subscribe()
    published = env.clock.now()
    env.publish("a")
    env.advance(2 * DAY)
    env.publish("b")
    view = env.broker.snapshots.create(SNAP, SUB)
    assert view.expire_time == published + 7 * DAY


def test_refused_when_it_would_expire_within_an_hour(env: Env) -> None:
    env.subscribe()
    env.publish("old")
    env.advance(7 * DAY - HOUR + 1)
    with pytest.raises(FailedPrecondition, match="expire within an hour"):
        env.broker.snapshots.create(SNAP, SUB)
    pull_and_ack(env)
    env.broker.snapshots.create(SNAP, SUB)  # nothing old left: fine


def test_expired_snapshots_disappear(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    env.advance(DAY)
    env.broker.snapshots.create(SNAP, SUB)
    assert env.broker.next_wakeup() == env.clock.now() + 6 * DAY
    env.advance(6 * DAY - 1)
    assert env.broker.snapshots.list_for_topic(TOPIC, 0, "").items == (SNAP,)
    env.advance(1)
    assert env.broker.snapshots.list(PROJECT, 0, "").items == ()
    with pytest.raises(NotFound):
        env.broker.snapshots.get(SNAP)
    store = env.broker.store
    if isinstance(
        store, MemoryStore
    ):  # SqliteStore: tests/server_stub/storage/test_sqlite_store.py
        assert store.snapshots.pinned_topics() == 0  # the topic log is unpinned


def test_update_labels_and_expire_time(env: Env) -> None:
    env.subscribe()
    view = env.broker.snapshots.create(SNAP, SUB, {"a": "1"})
    later = env.clock.now() + DAY
    changed = dataclasses.replace(view, labels={"b": "2"}, expire_time=later)
    assert env.broker.snapshots.update(changed, ["labels"]).labels == {"b": "2"}
    assert env.broker.snapshots.get(SNAP).expire_time == view.expire_time
    assert env.broker.snapshots.update(changed, ["expire_time"]).expire_time == later
    with pytest.raises(InvalidArgument, match="update_mask"):
        env.broker.snapshots.update(changed, [])
    with pytest.raises(InvalidArgument, match="'topic'"):
        env.broker.snapshots.update(changed, ["topic"])
    past = dataclasses.replace(view, expire_time=env.clock.now() - 1)
    with pytest.raises(InvalidArgument, match="future"):
        env.broker.snapshots.update(past, ["expire_time"])
    env.advance(DAY)
    with pytest.raises(NotFound):  # expired at the updated time
        env.broker.snapshots.get(SNAP)


# ------------------------------------------------------- seek to a snapshot


def test_seek_to_a_snapshot_restores_its_backlog_and_later_messages(env: Env) -> None:
    env.subscribe()
    env.publish("acked-before")
    pull_and_ack(env)
    env.publish("one", "two")
    env.broker.snapshots.create(SNAP, SUB)
    env.publish("three")
    assert pull_and_ack(env) == ["one", "two", "three"]
    assert env.broker.backlog(SUB) == 0
    env.broker.snapshots.seek(SUB, snapshot=SNAP)
    assert env.broker.backlog(SUB) == 3
    assert pull_and_ack(env) == ["one", "two", "three"]


def test_seek_to_a_snapshot_acks_what_was_acked_when_it_was_taken(env: Env) -> None:
    env.subscribe(retain_acked_messages=True)
    env.publish("a", "b")
    [a, _] = env.pull()
    env.ack(a.ack_id)
    env.broker.snapshots.create(SNAP, SUB)
    env.broker.snapshots.seek(SUB, time=0)  # everything retained unacked again
    assert env.broker.backlog(SUB) == 2
    env.broker.snapshots.seek(SUB, snapshot=SNAP)
    assert env.broker.backlog(SUB) == 1
    assert [m.data for m in env.broker.retained_acked(SUB)] == [b"a"]
    assert pull_and_ack(env) == ["b"]


def test_a_snapshot_serves_another_subscription_of_the_topic(env: Env) -> None:
    env.subscribe()
    env.broker.snapshots.create(SNAP, SUB)
    env.publish("after")
    late = env.subscribe("projects/p1/subscriptions/sub-late")
    assert env.pull(sub=late) == []
    env.broker.snapshots.seek(late, snapshot=SNAP)
    assert pull_and_ack(env, late) == ["after"]


def test_seek_applies_the_subscriptions_filter_to_later_messages(env: Env) -> None:
    env.subscribe()
    env.broker.snapshots.create(SNAP, SUB)
    env.broker.publishing.publish(TOPIC, [NewMessage(b"red", {"c": "red"}), NewMessage(b"blue")])
    red = env.subscribe("projects/p1/subscriptions/sub-red", filter='attributes.c = "red"')
    env.broker.snapshots.seek(red, snapshot=SNAP)
    assert pull_and_ack(env, red) == ["red"]


def test_snapshot_of_another_topic_is_refused(env: Env) -> None:
    env.subscribe()
    env.broker.snapshots.create(SNAP, SUB)
    env.broker.topics.create(TopicConfig(OTHER_TOPIC))
    other = "projects/p1/subscriptions/sub-other"
    env.broker.subscriptions.create(SubscriptionConfig(other, OTHER_TOPIC))
    with pytest.raises(FailedPrecondition, match="must be the same topic"):
        env.broker.snapshots.seek(other, snapshot=SNAP)
    with pytest.raises(NotFound):
        env.broker.snapshots.seek(SUB, snapshot="projects/p1/snapshots/missing")
    with pytest.raises(InvalidArgument, match="seek target"):
        env.broker.snapshots.seek(SUB)


def test_the_topic_log_keeps_only_what_snapshots_pin(env: Env) -> None:
    store = env.broker.store
    if not isinstance(store, MemoryStore):
        pytest.skip("MemoryStore's topic logs; SqliteStore's: test_sqlite_store.py")
    env.subscribe()
    env.publish("before")
    assert store.snapshots.pinned_topics() == 0
    env.broker.snapshots.create(SNAP, SUB)
    env.publish("x")
    second = "projects/p1/snapshots/snap-b"
    env.broker.snapshots.create(second, SUB)
    env.publish("y")
    assert [m.data for _, m in store.snapshots.topic_log(TOPIC, 0)] == [b"x", b"y"]
    env.broker.snapshots.delete(SNAP)
    assert [m.data for _, m in store.snapshots.topic_log(TOPIC, 0)] == [b"y"]
    env.broker.snapshots.delete(second)
    assert store.snapshots.pinned_topics() == 0


# ----------------------------------------------------------- seek to a time


def test_seek_to_a_time_replays_retained_acked_messages(env: Env) -> None:
    env.subscribe(retain_acked_messages=True)
    env.publish("a")
    env.advance(MINUTE)
    middle = env.clock.now()
    env.publish("b", "c")
    assert pull_and_ack(env) == ["a", "b", "c"]
    env.broker.snapshots.seek(SUB, time=middle)  # published at/after: unacked again
    assert pull_and_ack(env) == ["b", "c"]
    env.broker.snapshots.seek(SUB, time=0)
    assert pull_and_ack(env) == ["a", "b", "c"]


def test_seek_to_a_time_acks_earlier_unacked_messages(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    env.advance(MINUTE)
    middle = env.clock.now()
    env.publish("b")
    env.broker.snapshots.seek(SUB, time=middle)
    assert pull_and_ack(env) == ["b"]
    env.broker.snapshots.seek(SUB, time=0)  # acked messages are not retained: nothing to replay
    assert env.pull() == []


def test_seek_to_the_future_purges(env: Env) -> None:
    env.subscribe(retain_acked_messages=True)
    env.publish("a", "b")
    env.pull()
    env.broker.snapshots.seek(SUB, time=env.clock.now() + HOUR)
    assert env.broker.backlog(SUB) == 0
    assert env.pull() == []
    env.publish("c")  # later messages are delivered as usual
    assert pull_and_ack(env) == ["c"]


def test_seek_replays_only_what_retention_keeps(env: Env) -> None:
    env.subscribe(retain_acked_messages=True, message_retention_duration=10 * MINUTE)
    env.publish("old")
    env.advance(6 * MINUTE)
    env.publish("young")
    assert pull_and_ack(env) == ["old", "young"]
    env.advance(5 * MINUTE)  # "old" is 11 minutes old
    env.broker.snapshots.seek(SUB, time=0)
    assert pull_and_ack(env) == ["young"]


def test_seek_keeps_ordering_keys_in_order(env: Env) -> None:
    env.subscribe(enable_message_ordering=True, retain_acked_messages=True)
    env.publish("k1", "k2", "k3", key="k")
    for _ in range(3):
        assert env.ack(*ids(env.pull(1))).ok
    env.broker.snapshots.seek(SUB, time=0)
    assert data(env.pull()) == ["k1", "k2", "k3"]  # the key's order, again


# ------------------------------------------------- ack ids after a seek


def test_outstanding_ack_ids_are_invalid_after_a_seek_with_exactly_once(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    env.publish("a")
    [first] = env.pull()
    env.broker.snapshots.seek(SUB, time=0)
    reply = env.ack(first.ack_id)
    assert reply.failures == {first.ack_id: INVALID}
    assert env.nack(first.ack_id).failures == {first.ack_id: INVALID}
    [again] = env.pull()  # made unacked: delivered again, under a new id
    assert again.message.message_id == first.message.message_id
    assert again.ack_id != first.ack_id
    assert env.ack(again.ack_id).ok
    assert env.broker.backlog(SUB) == 0


def test_stale_ack_ids_do_not_settle_after_a_seek_without_exactly_once(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [first] = env.pull()
    env.broker.snapshots.seek(SUB, time=0)
    assert env.ack(first.ack_id).ok  # accepted (no error for a once-valid id) ...
    assert data(env.pull()) == ["a"]  # ... but the message is still delivered again


def test_seek_releases_stream_flow_control(env: Env) -> None:
    env.subscribe()
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=60, max_outstanding_messages=1)
    env.publish("a", "b")
    assert data(env.broker.leasing.stream_pull(stream)) == ["a"]
    assert env.broker.leasing.stream_pull(stream) == []
    env.broker.snapshots.seek(SUB, time=0)
    assert env.flow(stream).outstanding_messages == 0
    assert data(env.broker.leasing.stream_pull(stream)) == ["a"]


def test_seek_notifies_the_subscription(env: Env) -> None:
    env.subscribe()
    seen: list[str] = []
    env.broker.set_listener(seen.append)
    env.broker.snapshots.seek(SUB, time=0)
    assert seen == [SUB]


# ---------------------------------------------------------------- detach


def test_detached_subscription_reports_detached_and_stops_receiving(env: Env) -> None:
    env.subscribe()
    env.publish("before")
    env.broker.subscriptions.detach(SUB)
    assert env.broker.subscriptions.get(SUB).config.detached
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == ()
    # "All messages retained in the subscription are dropped" (DetachSubscription):
    # "before" goes, and "after" never reaches it.
    assert env.broker.backlog(SUB) == 0
    env.publish("after")
    assert env.broker.backlog(SUB) == 0
    with pytest.raises(FailedPrecondition, match="detached"):
        env.pull()
    with pytest.raises(FailedPrecondition, match="detached"):
        env.broker.leasing.open_stream(SUB, stream_ack_deadline=10)


def test_a_seek_on_a_detached_subscription_replays_nothing_of_its_topic(env: Env) -> None:
    # The topic's retention keeps "after", but the detached subscription is cut off from
    # its topic: a seek must not fill a backlog that nobody can pull.
    env.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=24 * 3600.0), ["message_retention_duration"]
    )
    env.subscribe()
    start = env.clock.now()
    env.publish("before")
    env.broker.subscriptions.detach(SUB)
    env.publish("after")
    env.broker.snapshots.seek(SUB, time=start)
    assert env.broker.backlog(SUB) == 0
