"""Seek and snapshots against ``eoclient serve`` and Google's emulator (0.8.20).

Replay scenarios run on both (``target``) with the same outcome; where the emulator departs
from the service (docs/protocol.md#where-the-emulator-differs: UpdateSnapshot
unimplemented), one test runs on both and pins each answer.

Times come from this machine's clock on both sides (the served reference server and
the emulator's JVM), so the scenarios leave half a second of margin around them.
"""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb

pytestmark = pytest.mark.emulator

DAY = 24 * 3600
MARGIN = 0.5  # seconds between a seek time and the publishes either side of it


@pytest.fixture(params=["reference", "emulator"])
def target(request: pytest.FixtureRequest, wire_factory: Callable[[str], Wire]) -> Wire:
    """A Wire to ``eoclient serve`` (subprocess) or to Google's emulator."""
    address = request.getfixturevalue("served" if request.param == "reference" else "emulator")
    return wire_factory(address)


def snapshot_name() -> str:
    return unique("snap").replace("/subscriptions/", "/snapshots/")


def seek_to(subscription: str, moment: datetime.datetime) -> pb.SeekRequest:
    request = pb.SeekRequest(subscription=subscription)
    stamp = moment.timestamp()
    request.time.seconds = int(stamp)
    request.time.nanos = int((stamp - int(stamp)) * 1e9)
    return request


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


async def pull_and_ack(wire: Wire, subscription: str, count: int) -> list[bytes]:
    received = await wire.pull(subscription, count)
    assert len(received) == count
    await wire.Acknowledge(
        pb.AcknowledgeRequest(subscription=subscription, ack_ids=[r.ack_id for r in received])
    )
    return sorted(r.message.data for r in received)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


async def test_seek_to_a_time_replays_retained_acked_messages(target: Wire) -> None:
    topic, sub = await target.subscription(retain_acked_messages=True)
    start = now() - datetime.timedelta(seconds=MARGIN)
    await target.publish(topic, b"early")
    await asyncio.sleep(MARGIN)
    middle = now()
    await asyncio.sleep(MARGIN)
    await target.publish(topic, b"late")
    assert await pull_and_ack(target, sub, 2) == [b"early", b"late"]
    await target.pull_nothing(sub)
    await target.Seek(seek_to(sub, middle))  # acked before, unacked after
    assert await pull_and_ack(target, sub, 1) == [b"late"]
    await target.pull_nothing(sub)
    await target.Seek(seek_to(sub, start))
    assert await pull_and_ack(target, sub, 2) == [b"early", b"late"]
    await target.Seek(seek_to(sub, now() + datetime.timedelta(seconds=1)))  # purge
    await target.pull_nothing(sub)


async def test_seek_to_a_time_without_retain_acked_replays_nothing_acked(target: Wire) -> None:
    topic, sub = await target.subscription()
    start = now() - datetime.timedelta(seconds=MARGIN)
    await target.publish(topic, b"acked")
    assert await pull_and_ack(target, sub, 1) == [b"acked"]
    await target.publish(topic, b"pending")
    await target.Seek(seek_to(sub, start))
    assert await pull_and_ack(target, sub, 1) == [b"pending"]
    await target.pull_nothing(sub)


async def retained_topic(wire: Wire) -> str:
    topic = unique("topic")
    config = pb.Topic(name=topic)
    config.message_retention_duration.seconds = DAY
    await wire.CreateTopic(config)
    return topic


async def test_topic_retention_lets_a_seek_replay_acked_messages(target: Wire) -> None:
    # Google's replay overview: topic message retention lets "any subscription attached
    # to the topic ... seek back in time and replay previously-acked messages", with no
    # retain_acked_messages. Both servers do (ours did not before 2026-11-25).
    topic = await retained_topic(target)
    _, sub = await target.subscription(topic)
    start = now() - datetime.timedelta(seconds=MARGIN)
    await target.publish(topic, b"a", b"b")
    assert await pull_and_ack(target, sub, 2) == [b"a", b"b"]
    await target.pull_nothing(sub)
    await target.Seek(seek_to(sub, start))
    assert await pull_and_ack(target, sub, 2) == [b"a", b"b"]
    await target.pull_nothing(sub)


async def test_emulator_delivers_retained_messages_older_than_a_new_subscription(
    served: str, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    """A message published before a subscription exists, on a topic with retention.

    The service: "Only messages published to the topic after the subscription is
    created are available to subscriber clients. The topic retention feature lets a
    subscription ... seek back in time and replay previously published messages"
    (subscription overview). Ours: nothing at first, the message after a seek. The
    emulator delivers it to the new subscription at once. Ours is right.
    """
    for address in (served, emulator):
        wire = wire_factory(address)
        topic = await retained_topic(wire)
        start = now() - datetime.timedelta(seconds=MARGIN)
        await wire.publish(topic, b"before-the-subscription")
        _, sub = await wire.subscription(topic)
        if address == emulator:
            assert await pull_and_ack(wire, sub, 1) == [b"before-the-subscription"]
        else:
            await wire.pull_nothing(sub)
        await wire.Seek(seek_to(sub, start))
        assert await pull_and_ack(wire, sub, 1) == [b"before-the-subscription"]
        await wire.pull_nothing(sub)


async def test_seek_to_a_snapshot_restores_its_backlog_and_later_messages(target: Wire) -> None:
    topic, sub = await target.subscription()
    await target.publish(topic, b"acked-before")
    assert await pull_and_ack(target, sub, 1) == [b"acked-before"]
    await target.publish(topic, b"in-backlog")
    name = snapshot_name()
    snapshot = await target.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    assert snapshot.topic == topic
    await target.publish(topic, b"after")
    assert await pull_and_ack(target, sub, 2) == [b"after", b"in-backlog"]
    await target.pull_nothing(sub)
    await target.Seek(pb.SeekRequest(subscription=sub, snapshot=name))
    assert await pull_and_ack(target, sub, 2) == [b"after", b"in-backlog"]
    await target.pull_nothing(sub)
    await target.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot=name))


async def test_missing_snapshot_and_subscription_are_not_found(target: Wire) -> None:
    _, sub = await target.subscription()
    error = await rpc_error(target.Seek(pb.SeekRequest(subscription=sub, snapshot=snapshot_name())))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    error = await rpc_error(
        target.CreateSnapshot(
            pb.CreateSnapshotRequest(name=snapshot_name(), subscription=unique("sub"))
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND


# ------------------------------------------------------------ emulator gaps


async def test_emulator_lacks_update_snapshot(
    served: str, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    """docs/protocol.md#where-the-emulator-differs: UpdateSnapshot is UNIMPLEMENTED on the
    emulator; ours applies it."""
    for address in (served, emulator):
        wire = wire_factory(address)
        _, sub = await wire.subscription()
        name = snapshot_name()
        await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
        update = pb.UpdateSnapshotRequest(
            snapshot=pb.Snapshot(name=name, labels={"run": "2"}),
            update_mask={"paths": ["labels"]},
        )
        if address == emulator:
            error = await rpc_error(wire.UpdateSnapshot(update))
            assert error.code() == grpc.StatusCode.UNIMPLEMENTED
            assert error.details() == (
                "Method google.pubsub.v1.Subscriber/UpdateSnapshot is unimplemented"
            )
        else:
            updated = await wire.UpdateSnapshot(update)
            assert dict(updated.labels) == {"run": "2"}
            got = await wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=name))
            assert dict(got.labels) == {"run": "2"}


async def test_expire_time_is_seven_days_minus_the_backlog_age(target: Wire) -> None:
    """7 d after the oldest unacked message the snapshot retains
    (docs/protocol.md#seek-and-snapshots); measured here, the emulator agrees
    (docs/protocol.md#where-the-emulator-differs: "now + 7 d" is the empty-backlog case)."""
    age = 1.0
    topic, sub = await target.subscription()
    created_at = now().timestamp()
    empty = await target.CreateSnapshot(
        pb.CreateSnapshotRequest(name=snapshot_name(), subscription=sub)
    )
    lifetime = empty.expire_time.seconds + empty.expire_time.nanos / 1e9 - created_at
    assert 7 * DAY - 0.5 < lifetime < 7 * DAY + 0.5
    await target.publish(topic, b"waiting")
    await asyncio.sleep(age)
    created_at = now().timestamp()
    snapshot = await target.CreateSnapshot(
        pb.CreateSnapshotRequest(name=snapshot_name(), subscription=sub)
    )
    lifetime = snapshot.expire_time.seconds + snapshot.expire_time.nanos / 1e9 - created_at
    assert 7 * DAY - age - 0.5 < lifetime < 7 * DAY - age + 0.2


async def test_snapshot_of_another_topic_is_refused(target: Wire) -> None:
    _, sub = await target.subscription()
    _, other = await target.subscription()
    name = snapshot_name()
    await target.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    error = await rpc_error(target.Seek(pb.SeekRequest(subscription=other, snapshot=name)))
    # Both FAILED_PRECONDITION; the emulator's text: "The subscription's topic ... is
    # different from that of the snapshot ...; they must match in order for Seek work."
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "topic" in (error.details() or "")
