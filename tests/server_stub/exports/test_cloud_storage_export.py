"""Cloud Storage export end to end on bucket directories: text and Avro files, batches by
count and by duration (FakeClock), object names by the grammar, the state, a missing bucket
(NOT_FOUND, messages wait, exported once it exists), unwritable messages and dead letters,
ordering keys, filters, seek, detach and delete."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.buckets import BucketStore
from eoclient.server_stub.exports.files import (
    PUBSUB_MESSAGE_SCHEMA,
    PUBSUB_MESSAGE_WITH_METADATA_SCHEMA,
)
from eoclient.server_stub.server import ReferenceServer, run_server

from .support import avro_records, cs_config, eventually, objects

UUID = r"[0-9a-f]{32}"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ReferenceServer]:
    async with run_server(clock=FakeClock(), buckets_dir=tmp_path / "buckets") as srv:
        yield srv


@pytest.fixture
async def wire(server: ReferenceServer) -> AsyncIterator[Wire]:
    client = Wire(server.address)
    yield client
    await client.close()


def store(server: ReferenceServer) -> BucketStore:
    assert server.buckets is not None
    return server.buckets


async def _publish(wire: Wire, topic: str, count: int, *, key: str = "") -> list[str]:
    ids: list[str] = []
    for start in range(0, count, 1000):
        batch = [f"m{i}".encode() for i in range(start, min(start + 1000, count))]
        ids += await wire.publish(topic, *batch, ordering_key=key)
    return ids


async def _advance(server: ReferenceServer, seconds: float) -> None:
    clock = server.clock
    assert isinstance(clock, FakeClock)
    clock.advance(seconds)
    server.tick()


async def _open_messages(server: ReferenceServer, name: str, count: int) -> bool:
    assert server.exports is not None
    return server.exports.status(name).open_messages == count


async def test_text_files_by_count_then_by_duration(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("text-out")
    topic, name = await wire.subscription(
        ack_deadline_seconds=600,
        cloud_storage_config=cs_config(
            "text-out", filename_prefix="logs/", filename_suffix=".txt", max_messages=1000
        ),
    )
    ids = await _publish(wire, topic, 2500)
    first = await objects(store(server), "text-out", 2)
    # The last 500 wait for max_duration (5 minutes by default), counted from when their
    # batch opened: the clock moves only once the worker holds them (else a batch opened
    # after the move would wait 5 more minutes).
    await eventually(lambda: _open_messages(server, name, 500), "the third batch holds 500")
    await _advance(server, 301)
    found = await objects(store(server), "text-out", 3)
    assert first == found[:2] or {o.name for o in first} < {o.name for o in found}
    lines: list[bytes] = []
    sizes = []
    for info in found:
        assert re.fullmatch(
            rf"logs/\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00_{UUID}\.txt", info.name
        ), info.name
        content = (await store(server).read("text-out", info.name)).splitlines()
        lines += content
        sizes.append(len(content))
    assert sorted(lines) == sorted(f"m{i}".encode() for i in range(2500))
    assert len(ids) == 2500
    assert sorted(sizes) == [500, 1000, 1000]
    # Every message was acknowledged: nothing left to deliver.
    assert server.broker.backlog(name) == 0
    status = server.exports.status(name) if server.exports else None
    assert status is not None
    assert (status.objects, status.messages, status.state) == (3, 2500, "ACTIVE")
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name))
    assert got.cloud_storage_config.state == pb.CloudStorageConfig.ACTIVE


async def test_avro_files_with_and_without_metadata(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("avro-out")
    topic = await wire.topic()
    _, plain = await wire.subscription(
        topic,
        cloud_storage_config=cs_config(
            "avro-out", filename_prefix="plain/", avro=True, max_messages=1000
        ),
    )
    _, meta = await wire.subscription(
        topic,
        cloud_storage_config=cs_config(
            "avro-out", filename_prefix="meta/", write_metadata=True, max_messages=1000
        ),
    )
    messages = [
        pb.PubsubMessage(
            data=f"d{i}".encode(), attributes={"n": str(i)}, ordering_key="k" if i % 2 else ""
        )
        for i in range(1000)
    ]
    ids = []
    for message in messages:  # one ordering key per Publish
        published = await wire.Publish(pb.PublishRequest(topic=topic, messages=[message]))
        ids += list(published.message_ids)
    found = await objects(store(server), "avro-out", 2)
    by_prefix = {info.name.split("/")[0]: info for info in found}
    schema, records = avro_records(await store(server).read("avro-out", by_prefix["plain"].name))
    assert schema == PUBSUB_MESSAGE_SCHEMA
    assert sorted(r["data"] for r in records) == sorted(m.data for m in messages)
    schema, records = avro_records(await store(server).read("avro-out", by_prefix["meta"].name))
    assert schema == PUBSUB_MESSAGE_WITH_METADATA_SCHEMA
    by_id = {r["message_id"]: r for r in records}
    assert sorted(by_id) == sorted(ids)
    first = by_id[ids[1]]
    assert first["subscription_name"] == meta
    assert first["data"] == b"d1"
    assert first["attributes"] == {"n": "1", "ordering_key": "k"}
    assert by_id[ids[0]]["attributes"] == {"n": "0"}
    assert server.broker.backlog(plain) == 0
