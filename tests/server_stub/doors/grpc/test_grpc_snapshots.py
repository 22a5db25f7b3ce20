"""Snapshots, Seek and DetachSubscription over gRPC, on the in-process reference server
(fake clock), then through the official google-cloud-pubsub client."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import pubsub_v1
from support.wire import PROJECT, Wire, unique

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.server import ReferenceServer

HOUR = 3600
DAY = 24 * HOUR
PERMANENT = "PERMANENT_FAILURE_INVALID_ACK_ID"


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value


def snapshot_name(project: str = PROJECT) -> str:
    return unique("snap", project).replace("/subscriptions/", "/snapshots/")


def set_time(target: Any, seconds: float) -> None:
    """Fill a Timestamp field (our descriptors' class, not timestamp_pb2's)."""
    target.seconds = int(seconds)
    target.nanos = 0


def seek_time(subscription: str, seconds: float) -> pb.SeekRequest:
    request = pb.SeekRequest(subscription=subscription)
    set_time(request.time, seconds)
    return request


async def pull_and_ack(wire: Wire, subscription: str, count: int) -> list[bytes]:
    received = await wire.pull(subscription, count)
    await wire.Acknowledge(
        pb.AcknowledgeRequest(subscription=subscription, ack_ids=[r.ack_id for r in received])
    )
    return [r.message.data for r in received]


# ----------------------------------------------------------------- lifecycle


async def test_snapshot_lifecycle(wire: Wire, clock: FakeClock) -> None:
    topic, sub = await wire.subscription()
    name = snapshot_name()
    created = await wire.CreateSnapshot(
        pb.CreateSnapshotRequest(name=name, subscription=sub, labels={"team": "a"})
    )
    assert (created.name, created.topic, dict(created.labels)) == (name, topic, {"team": "a"})
    assert created.expire_time.ToNanoseconds() == int((clock.now() + 7 * DAY) * 1e9)
    assert await wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=name)) == created
    listed = await wire.ListTopicSnapshots(pb.ListTopicSnapshotsRequest(topic=topic))
    assert list(listed.snapshots) == [name]

    error = await rpc_error(
        wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    )
    assert error.code() == grpc.StatusCode.ALREADY_EXISTS
    error = await rpc_error(
        wire.CreateSnapshot(
            pb.CreateSnapshotRequest(name=snapshot_name(), subscription=unique("sub"))
        )
    )
    assert error.code() == grpc.StatusCode.NOT_FOUND

    later = clock.now() + DAY
    update = pb.UpdateSnapshotRequest(
        snapshot=pb.Snapshot(name=name, labels={"team": "b"}),
        update_mask={"paths": ["labels", "expire_time"]},
    )
    set_time(update.snapshot.expire_time, later)
    updated = await wire.UpdateSnapshot(update)
    assert dict(updated.labels) == {"team": "b"}
    assert updated.expire_time.ToSeconds() == int(later)
    error = await rpc_error(
        wire.UpdateSnapshot(
            pb.UpdateSnapshotRequest(
                snapshot=pb.Snapshot(name=name, topic="x"), update_mask={"paths": ["topic"]}
            )
        )
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT

    await wire.DeleteSnapshot(pb.DeleteSnapshotRequest(snapshot=name))
    error = await rpc_error(wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=name)))
    assert error.code() == grpc.StatusCode.NOT_FOUND


async def test_server_assigns_a_name_when_omitted(wire: Wire) -> None:
    _, sub = await wire.subscription()
    created = await wire.CreateSnapshot(pb.CreateSnapshotRequest(subscription=sub))
    assert created.name.startswith(f"projects/{PROJECT}/snapshots/")
    assert await wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=created.name)) == created


async def test_list_snapshots_pages_through_one_project(wire: Wire) -> None:
    project = "snapshot-listing"
    _, sub = await wire.subscription()
    names = sorted(snapshot_name(project) for _ in range(5))
    for name in names:
        await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    seen: list[str] = []
    token = ""
    while True:
        page = await wire.ListSnapshots(
            pb.ListSnapshotsRequest(project=f"projects/{project}", page_size=2, page_token=token)
        )
        seen.extend(s.name for s in page.snapshots)
        token = page.next_page_token
        if not token:
            break
    assert seen == names


async def test_too_old_a_backlog_is_refused_and_snapshots_expire(
    wire: Wire, clock: FakeClock, reference: ReferenceServer
) -> None:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"old")
    clock.advance(6 * DAY)
    name = snapshot_name()
    created = await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    assert created.expire_time.ToSeconds() == int(clock.now() + DAY)  # 7 d - 6 d of age
    clock.advance(DAY - HOUR / 2)
    error = await rpc_error(
        wire.CreateSnapshot(pb.CreateSnapshotRequest(name=snapshot_name(), subscription=sub))
    )
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "expire within an hour" in (error.details() or "")
    clock.advance(HOUR / 2)
    reference.broker.tick()
    error = await rpc_error(wire.GetSnapshot(pb.GetSnapshotRequest(snapshot=name)))
    assert error.code() == grpc.StatusCode.NOT_FOUND


# ---------------------------------------------------------------------- seek


async def test_seek_to_a_time_replays_retained_acked_messages(wire: Wire, clock: FakeClock) -> None:
    topic, sub = await wire.subscription(retain_acked_messages=True)
    await wire.publish(topic, b"a")
    clock.advance(10)
    middle = clock.now()
    await wire.publish(topic, b"b")
    assert await pull_and_ack(wire, sub, 2) == [b"a", b"b"]
    await wire.Seek(seek_time(sub, middle))
    assert await pull_and_ack(wire, sub, 1) == [b"b"]
    await wire.Seek(seek_time(sub, middle - 10))
    assert await pull_and_ack(wire, sub, 2) == [b"a", b"b"]
    await wire.Seek(seek_time(sub, clock.now() + 60))
    await wire.pull_nothing(sub)


async def test_seek_to_a_snapshot_restores_the_backlog(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    await wire.publish(topic, b"one")
    name = snapshot_name()
    await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    await wire.publish(topic, b"two")
    assert await pull_and_ack(wire, sub, 2) == [b"one", b"two"]
    await wire.pull_nothing(sub)
    await wire.Seek(pb.SeekRequest(subscription=sub, snapshot=name))
    assert await pull_and_ack(wire, sub, 2) == [b"one", b"two"]


async def test_seek_to_a_snapshot_of_another_topic_is_refused(wire: Wire) -> None:
    _, sub = await wire.subscription()
    _, other = await wire.subscription()
    name = snapshot_name()
    await wire.CreateSnapshot(pb.CreateSnapshotRequest(name=name, subscription=sub))
    error = await rpc_error(wire.Seek(pb.SeekRequest(subscription=other, snapshot=name)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "must be the same topic" in (error.details() or "")
    error = await rpc_error(wire.Seek(pb.SeekRequest(subscription=sub)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_seek_invalidates_exactly_once_ack_ids_and_redelivers(wire: Wire) -> None:
    topic, sub = await wire.subscription(enable_exactly_once_delivery=True)
    await wire.publish(topic, b"m")
    [first] = await wire.pull(sub, 1)
    await wire.Seek(seek_time(sub, 0))
    error = await rpc_error(
        wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[first.ack_id]))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = Wire.error_info(error)
    assert info is not None
    assert dict(info.metadata) == {first.ack_id: PERMANENT}
    [again] = await wire.pull(sub, 1)
    assert again.message.message_id == first.message.message_id
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=sub, ack_ids=[again.ack_id]))


async def test_an_open_stream_receives_what_a_seek_makes_unacked(wire: Wire) -> None:
    topic, sub = await wire.subscription(retain_acked_messages=True)
    stream = wire.stream(sub)
    await wire.publish(topic, b"x")
    [received] = await stream.messages(1)
    stream.send(ack_ids=[received.ack_id])  # before or after the seek: no matter
    await wire.Seek(seek_time(sub, 0))
    [again] = await stream.messages(1)
    assert again.message.message_id == received.message.message_id


# -------------------------------------------------------------------- detach


async def test_detached_subscription(wire: Wire) -> None:
    topic, sub = await wire.subscription()
    await wire.DetachSubscription(pb.DetachSubscriptionRequest(subscription=sub))
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=sub))
    assert got.detached
    listed = await wire.ListTopicSubscriptions(pb.ListTopicSubscriptionsRequest(topic=topic))
    assert sub not in listed.subscriptions
    await wire.publish(topic, b"after")
    error = await rpc_error(wire.Pull(pb.PullRequest(subscription=sub, max_messages=1)))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION


# ------------------------------------------------------------ official client


async def test_official_client_create_snapshot_and_seek(
    wire: Wire, reference: ReferenceServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """google-cloud-pubsub's SubscriberClient (sync) against the in-process server."""
    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", reference.address)
    topic, sub = await wire.subscription(retain_acked_messages=True)
    await wire.publish(topic, b"one")
    name = snapshot_name()

    def admin() -> tuple[Any, Any]:
        with pubsub_v1.SubscriberClient() as client:
            snapshot = client.create_snapshot(request={"name": name, "subscription": sub})
            try:
                client.create_snapshot(request={"name": name, "subscription": sub})
            except api_exceptions.AlreadyExists:
                pass
            else:
                raise AssertionError("a second CreateSnapshot must fail")
            return snapshot, client.get_snapshot(request={"snapshot": name})

    snapshot, got = await asyncio.to_thread(admin)
    assert (snapshot.name, snapshot.topic) == (name, topic)
    assert got.name == name
    assert await pull_and_ack(wire, sub, 1) == [b"one"]

    def seek() -> None:
        with pubsub_v1.SubscriberClient() as client:
            client.seek(request={"subscription": sub, "snapshot": name})

    await asyncio.to_thread(seek)
    assert await pull_and_ack(wire, sub, 1) == [b"one"]

    when = datetime.datetime.fromtimestamp(reference.clock.now() + 60, datetime.UTC)

    def seek_to_time() -> None:
        with pubsub_v1.SubscriberClient() as client:
            client.seek(request={"subscription": sub, "time": when})

    await asyncio.to_thread(seek_to_time)
    await wire.pull_nothing(sub)
