"""Cloud Storage import topics on a running server, end to end, with real components: Google's
``google-cloud-pubsub`` client and ``google-cloud-storage`` on a real Cloud Storage emulator
(``gcp-storage-emulator`` at ``STORAGE_EMULATOR_HOST``), and bucket directories
(``buckets_dir``) with a data directory across a restart.

* a text topic publishes one message per line of the objects its glob matches — those in
  the bucket when it became an import topic and one added later — and shows ACTIVE;
* nothing is ingested twice across a restart, and what was added while it was down is;
* Avro files (one message per record) and Pub/Sub Avro files (data, attributes, ordering
  key restored);
* a missing bucket shows BUCKET_NOT_FOUND until it exists; an object that is not Avro is
  an ingestion failure (logged as a platform log, counted) and the others still go;
* switching back to a plain topic stops the ingestion.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import fastavro
import pytest
from google.pubsub_v1.types import IngestionDataSourceSettings, Topic
from support.official_clients import OfficialClients, in_thread
from support.storage_emulator import storage_client, storage_emulator
from support.wire import Wire, unique

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.buckets import LocalBuckets
from eoclient.server_stub.server import ReferenceServer, run_server

S = pb.IngestionDataSourceSettings
POLL = 0.05  # the servers here list their buckets every 50 ms
WAIT = 10.0
STATE = {
    "type": "record",
    "name": "State",
    "fields": [{"name": "name", "type": "string"}, {"name": "post_abbr", "type": "string"}],
}
# What a Cloud Storage subscription writes with write_metadata (the export's Avro schema).
EXPORTED = {
    "type": "record",
    "namespace": "com.google.pubsub",
    "name": "PubsubMessageWithMetadata",
    "fields": [
        {"name": "subscription_name", "type": "string"},
        {"name": "message_id", "type": "string"},
        {"name": "publish_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "data", "type": "bytes"},
    ],
}


def avro_file(schema: dict[str, Any], records: list[dict[str, Any]]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    return out.getvalue()


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not await check():
        assert time.monotonic() < deadline, f"not within {WAIT} s: {what}"
        await asyncio.sleep(0.02)


async def become_import_topic(wire: Wire, topic: str, storage: S.CloudStorage) -> pb.Topic:
    settings = S(cloud_storage=storage)
    request = pb.UpdateTopicRequest(
        topic=pb.Topic(name=topic, ingestion_data_source_settings=settings),
        update_mask={"paths": ["ingestion_data_source_settings"]},
    )
    return await wire.UpdateTopic(request)


def data_of(received: list[pb.ReceivedMessage]) -> list[bytes]:
    return sorted(r.message.data for r in received)


async def ack(wire: Wire, subscription: str, received: list[pb.ReceivedMessage]) -> None:
    ids = [r.ack_id for r in received]
    await wire.Acknowledge(pb.AcknowledgeRequest(subscription=subscription, ack_ids=ids))


# ----------------------------------------------------- the Cloud Storage emulator


@pytest.fixture
def emulator(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with storage_emulator() as url:
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
        yield url


@pytest.fixture
async def on_emulator(emulator: str) -> AsyncIterator[ReferenceServer]:
    async with run_server(ingestion_poll_interval=POLL) as server:
        yield server


def _text_topic_flow(c: OfficialClients, emulator: str, topic: str, sub: str) -> None:
    """Google's clients only: storage writes the objects, pubsub makes the import topic."""
    bucket = storage_client(emulator).create_bucket(unique("bucket").rsplit("/", 1)[1])
    bucket.blob("logs/2024/a.txt").upload_from_string("alpha\nbeta\ngamma\n")
    bucket.blob("logs/2024/skipped.csv").upload_from_string("not,matched\n")
    c.publisher.create_topic(name=topic)
    c.subscriber.create_subscription(name=sub, topic=topic)
    settings = IngestionDataSourceSettings(
        cloud_storage=IngestionDataSourceSettings.CloudStorage(
            bucket=bucket.name,
            text_format=IngestionDataSourceSettings.CloudStorage.TextFormat(),
            match_glob="logs/**.txt",
            minimum_object_create_time="1970-01-01T00:00:01Z",
        )
    )
    updated = c.publisher.update_topic(
        request={
            "topic": {"name": topic, "ingestion_data_source_settings": settings},
            "update_mask": {"paths": ["ingestion_data_source_settings"]},
        }
    )
    assert updated.ingestion_data_source_settings.cloud_storage.text_format.delimiter == "\n"
    bucket.blob("logs/later.txt").upload_from_string("delta\nepsilon")


async def test_text_objects_one_message_per_line_including_later_ones(
    on_emulator: ReferenceServer, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    clients = OfficialClients(on_emulator, "grpc")
    try:
        topic, sub = unique("topic"), unique("sub")
        await in_thread(lambda: _text_topic_flow(clients, emulator, topic, sub))
        wire = wire_factory(on_emulator.address)
        received = await wire.pull(sub, 5, timeout=WAIT)
        assert data_of(received) == [b"alpha", b"beta", b"delta", b"epsilon", b"gamma"]
        await ack(wire, sub, received)
        await asyncio.sleep(POLL * 6)  # several more looks: nothing is ingested twice
        await wire.pull_nothing(sub)
        shown = await in_thread(lambda: clients.publisher.get_topic(topic=topic))
        assert shown.state == Topic.State.ACTIVE
        state = shown.ingestion_data_source_settings.cloud_storage.state
        assert state == IngestionDataSourceSettings.CloudStorage.State.ACTIVE
        status = on_emulator.ingestion.status(topic)
        assert status is not None
        assert (status.counters.objects, status.counters.messages) == (2, 5)
    finally:
        clients.close()


async def test_missing_bucket_then_created(
    on_emulator: ReferenceServer, emulator: str, wire_factory: Callable[[str], Wire]
) -> None:
    wire = wire_factory(on_emulator.address)
    bucket = unique("bucket").rsplit("/", 1)[1]
    topic = unique("topic")
    storage = S.CloudStorage(bucket=bucket, text_format=S.CloudStorage.TextFormat())
    created = await wire.CreateTopic(
        pb.Topic(name=topic, ingestion_data_source_settings=S(cloud_storage=storage))
    )
    assert created.ingestion_data_source_settings.cloud_storage.state == S.CloudStorage.ACTIVE

    async def state_is(expected: int, topic_state: int) -> bool:
        shown = await wire.GetTopic(pb.GetTopicRequest(topic=topic))
        got = shown.ingestion_data_source_settings.cloud_storage.state
        return (got, shown.state) == (expected, topic_state)

    await eventually(
        lambda: state_is(S.CloudStorage.BUCKET_NOT_FOUND, pb.Topic.INGESTION_RESOURCE_ERROR),
        "BUCKET_NOT_FOUND",
    )
    await in_thread(lambda: storage_client(emulator).create_bucket(bucket))
    await eventually(lambda: state_is(S.CloudStorage.ACTIVE, pb.Topic.ACTIVE), "ACTIVE again")


# ----------------------------------------------------- bucket directories


async def test_nothing_ingested_twice_across_a_restart(
    tmp_path: Path, wire_factory: Callable[[str], Wire]
) -> None:
    data_dir, buckets_dir = tmp_path / "data", tmp_path / "buckets"
    buckets = LocalBuckets(buckets_dir)
    await buckets.create_bucket("lines")
    await buckets.write_bytes("lines", "one.txt", b"1\n2\n")
    topic, sub = unique("topic"), unique("sub")
    async with run_server(
        data_dir=data_dir, buckets_dir=buckets_dir, ingestion_poll_interval=POLL
    ) as first:
        wire = wire_factory(first.address)
        await wire.CreateTopic(pb.Topic(name=topic))
        await wire.CreateSubscription(pb.Subscription(name=sub, topic=topic))
        await become_import_topic(
            wire, topic, S.CloudStorage(bucket="lines", text_format=S.CloudStorage.TextFormat())
        )
        await buckets.write_bytes("lines", "two.txt", b"3\n")
        received = await wire.pull(sub, 3, timeout=WAIT)
        assert data_of(received) == [b"1", b"2", b"3"]
        await ack(wire, sub, received)
        # Stopped right after the messages arrived: the object under way is finished and
        # recorded before the server stops (nothing repeats after a clean stop).
    await buckets.write_bytes("lines", "three.txt", b"4\n5\n")  # while the server is down
    async with run_server(
        data_dir=data_dir, buckets_dir=buckets_dir, ingestion_poll_interval=POLL
    ) as second:
        wire = wire_factory(second.address)
        received = await wire.pull(sub, 2, timeout=WAIT)
        assert data_of(received) == [b"4", b"5"]
        await ack(wire, sub, received)
        await asyncio.sleep(POLL * 6)
        await wire.pull_nothing(sub)
        shown = await wire.GetTopic(pb.GetTopicRequest(topic=topic))
        assert shown.ingestion_data_source_settings.cloud_storage.bucket == "lines"
    await buckets.aclose()


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[tuple[ReferenceServer, LocalBuckets]]:
    buckets = LocalBuckets(tmp_path / "buckets")
    async with run_server(buckets_dir=tmp_path / "buckets", ingestion_poll_interval=POLL) as srv:
        yield srv, buckets
    await buckets.aclose()


async def test_avro_and_pubsub_avro_objects(
    local: tuple[ReferenceServer, LocalBuckets], wire_factory: Callable[[str], Wire]
) -> None:
    server, buckets = local
    wire = wire_factory(server.address)
    await buckets.create_bucket("avro-in")
    states = [{"name": "Alaska", "post_abbr": "AK"}, {"name": "Ohio", "post_abbr": "OH"}]
    await buckets.write_bytes("avro-in", "states/part-0.avro", avro_file(STATE, states))
    exported = [
        {
            "subscription_name": "projects/p1/subscriptions/export",
            "message_id": "17",
            "publish_time": 1_700_000_000_000_000,
            "attributes": {"origin": "export", "ordering_key": "k1"},
            "data": b"restored",
        }
    ]
    await buckets.write_bytes("avro-in", "export/2024-01-01.avro", avro_file(EXPORTED, exported))

    avro_topic, avro_sub = await wire.subscription()
    await become_import_topic(
        wire,
        avro_topic,
        S.CloudStorage(
            bucket="avro-in", avro_format=S.CloudStorage.AvroFormat(), match_glob="states/*"
        ),
    )
    pubsub_topic, pubsub_sub = await wire.subscription(enable_message_ordering=True)
    await become_import_topic(
        wire,
        pubsub_topic,
        S.CloudStorage(
            bucket="avro-in",
            pubsub_avro_format=S.CloudStorage.PubSubAvroFormat(),
            match_glob="export/**",
        ),
    )
    records = await wire.pull(avro_sub, 2, timeout=WAIT)
    parsed = fastavro.parse_schema(STATE)
    decoded = [fastavro.schemaless_reader(io.BytesIO(r.message.data), parsed) for r in records]
    assert sorted(decoded, key=json.dumps) == sorted(states, key=json.dumps)
    [restored] = await wire.pull(pubsub_sub, 1, timeout=WAIT)
    message = restored.message
    assert (message.data, dict(message.attributes), message.ordering_key) == (
        b"restored",
        {"origin": "export"},
        "k1",
    )
    assert message.message_id != "17"  # a new message, published anew


async def test_unparsable_object_is_a_logged_failure_and_the_rest_goes_on(
    local: tuple[ReferenceServer, LocalBuckets],
    wire_factory: Callable[[str], Wire],
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, buckets = local
    wire = wire_factory(server.address)
    await buckets.create_bucket("mixed")
    await buckets.write_bytes("mixed", "a-broken.avro", b"this is not avro")
    good = avro_file(STATE, [{"name": "Utah", "post_abbr": "UT"}])
    await buckets.write_bytes("mixed", "b-good.avro", good)
    topic, sub = await wire.subscription()
    storage = S.CloudStorage(bucket="mixed", avro_format=S.CloudStorage.AvroFormat())
    request = pb.UpdateTopicRequest(
        topic=pb.Topic(
            name=topic,
            ingestion_data_source_settings=S(
                cloud_storage=storage,
                platform_logs_settings=pb.PlatformLogsSettings(
                    severity=pb.PlatformLogsSettings.WARNING
                ),
            ),
        ),
        update_mask={"paths": ["ingestion_data_source_settings"]},
    )
    with caplog.at_level(logging.WARNING, "eoclient.server_stub.ingestion.platform_logs"):
        await wire.UpdateTopic(request)
        [record] = await wire.pull(sub, 1, timeout=WAIT)
    decoded = fastavro.schemaless_reader(
        io.BytesIO(record.message.data), fastavro.parse_schema(STATE)
    )
    assert decoded == {"name": "Utah", "post_abbr": "UT"}
    events = [
        json.loads(r.getMessage())
        for r in caplog.records
        if r.name == "eoclient.server_stub.ingestion.platform_logs"
    ]
    assert len(events) == 1
    failure = events[0]["cloudStorageFailure"]
    assert (events[0]["topic"], failure["bucket"], failure["objectName"]) == (
        topic,
        "mixed",
        "a-broken.avro",
    )
    assert "avroFailureReason" in failure
    status = server.ingestion.status(topic)
    assert status is not None
    assert status.counters.failures == {"avro": 1}
    shown = await wire.GetTopic(pb.GetTopicRequest(topic=topic))
    assert shown.ingestion_data_source_settings.cloud_storage.state == S.CloudStorage.ACTIVE


async def test_back_to_a_plain_topic_stops_ingesting(
    local: tuple[ReferenceServer, LocalBuckets], wire_factory: Callable[[str], Wire]
) -> None:
    server, buckets = local
    wire = wire_factory(server.address)
    await buckets.create_bucket("stop")
    await buckets.write_bytes("stop", "first.txt", b"first\n")
    topic, sub = await wire.subscription()
    await become_import_topic(
        wire, topic, S.CloudStorage(bucket="stop", text_format=S.CloudStorage.TextFormat())
    )
    received = await wire.pull(sub, 1, timeout=WAIT)
    await ack(wire, sub, received)
    plain = await wire.UpdateTopic(
        pb.UpdateTopicRequest(
            topic=pb.Topic(name=topic), update_mask={"paths": ["ingestion_data_source_settings"]}
        )
    )
    assert not plain.HasField("ingestion_data_source_settings")
    await buckets.write_bytes("stop", "second.txt", b"second\n")
    await asyncio.sleep(POLL * 6)
    await wire.pull_nothing(sub)
    assert server.ingestion.status(topic) is None


async def test_metrics(
    local: tuple[ReferenceServer, LocalBuckets], wire_factory: Callable[[str], Wire]
) -> None:
    server, buckets = local
    wire = wire_factory(server.address)
    await buckets.create_bucket("counted")
    await buckets.write_bytes("counted", "a.txt", b"x\ny\nz\n")
    await buckets.write_bytes("counted", "b.avro", b"not avro")
    topic, sub = await wire.subscription()
    await become_import_topic(
        wire, topic, S.CloudStorage(bucket="counted", text_format=S.CloudStorage.TextFormat())
    )
    avro_topic = await wire.topic()
    await become_import_topic(
        wire,
        avro_topic,
        S.CloudStorage(
            bucket="counted", avro_format=S.CloudStorage.AvroFormat(), match_glob="*.avro"
        ),
    )
    await wire.pull(sub, 3, timeout=WAIT)

    async def scrape() -> str:
        async with (
            aiohttp.ClientSession(server.rest_url) as http,
            http.get("/metrics") as response,
        ):
            return await response.text()

    async def failed() -> bool:
        return 'reason="avro"' in await scrape()

    await eventually(failed, "the avro failure counted")
    text = await scrape()  # labels in name order
    source = 'source="cloud_storage"'
    assert f'eoclient_topic_ingestion_messages_total{{{source},topic="{topic}"}} 4.0' in text
    assert f'eoclient_topic_ingestion_objects_total{{{source},topic="{topic}"}} 2.0' in text
    failed_avro = f'{{reason="avro",{source},topic="{avro_topic}"}} 1.0'
    assert f"eoclient_topic_ingestion_failures_total{failed_avro}" in text
    active = f'{{{source},state="ACTIVE",topic="{topic}"}} 1.0'
    assert f"eoclient_topic_ingestion_state{active}" in text
