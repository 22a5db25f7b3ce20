"""The rules every subscription keeps, on Cloud Storage exports (bucket directories, a
FakeClock): a missing bucket (NOT_FOUND, messages wait, then exported), max_bytes, the topic
schema (its records, SCHEMA_MISMATCH, unwritable messages to the dead-letter topic),
ordering keys within a file, filters, seek, detach, delete, /metrics."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient._proto import schema_pb2
from eoclient.server_stub.buckets import BucketStore
from eoclient.server_stub.server import ReferenceServer, run_server

from .support import avro_records, cs_config, eventually, objects

CS = pb.CloudStorageConfig


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


async def _state(wire: Wire, name: str) -> int:
    got = await wire.GetSubscription(pb.GetSubscriptionRequest(subscription=name))
    return int(got.cloud_storage_config.state)


def _advance(server: ReferenceServer, seconds: float) -> None:
    assert isinstance(server.clock, FakeClock)
    server.clock.advance(seconds)
    server.tick()


async def test_a_missing_bucket_is_not_found_and_messages_wait(
    server: ReferenceServer, wire: Wire
) -> None:
    topic, name = await wire.subscription(
        cloud_storage_config=cs_config("later", max_messages=1000)
    )
    assert await _state(wire, name) == CS.NOT_FOUND
    listed = await wire.ListSubscriptions(pb.ListSubscriptionsRequest(project="projects/p1"))
    [mine] = [s for s in listed.subscriptions if s.name == name]
    assert mine.cloud_storage_config.state == CS.NOT_FOUND
    await wire.publish(topic, *[f"w{i}".encode() for i in range(1000)])
    _advance(server, 1)
    await eventually(lambda: _async(server.broker.backlog(name) == 1000), "the messages wait")
    await store(server).create_bucket("later")
    _advance(server, 2)  # the worker looks again
    [info] = await objects(store(server), "later", 1)
    assert len((await store(server).read("later", info.name)).splitlines()) == 1000
    assert await _state(wire, name) == CS.ACTIVE


async def _async(value: bool) -> bool:
    return value


async def test_max_bytes_closes_files(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("sized")
    topic, _ = await wire.subscription(cloud_storage_config=cs_config("sized", max_bytes=1000))
    # 30 messages of 99 bytes + newline: 10 a file.
    await wire.publish(topic, *[bytes([65 + i % 26]) * 99 for i in range(30)])
    found = await objects(store(server), "sized", 3)
    assert sorted(info.size for info in found) == [1000, 1000, 1000]
    # One message larger than max_bytes makes a file of its own, at once.
    await wire.publish(topic, b"x" * 5000)
    found = await objects(store(server), "sized", 4)
    assert max(info.size for info in found) == 5001


AVRO_SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "test.exports",
    "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}],
}


async def _schema_topic(wire: Wire, *, encoding: int = schema_pb2.JSON) -> str:
    schema_id = f"reading-{id(wire) % 100000}"
    create = wire.channel.unary_unary(
        "/google.pubsub.v1.SchemaService/CreateSchema",
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=schema_pb2.Schema.FromString,
    )
    created = await create(
        schema_pb2.CreateSchemaRequest(
            parent="projects/p1",
            schema_id=schema_id,
            schema=schema_pb2.Schema(
                type_=schema_pb2.Schema.AVRO, definition=json.dumps(AVRO_SCHEMA)
            ),
        )
    )
    topic = await wire.topic()
    await _set_schema(wire, topic, pb.SchemaSettings(schema=created.name, encoding=encoding))
    return topic


async def _set_schema(wire: Wire, topic: str, settings: pb.SchemaSettings) -> None:
    request = pb.UpdateTopicRequest(topic=pb.Topic(name=topic, schema_settings=settings))
    request.update_mask.paths.append("schema_settings")
    await wire.UpdateTopic(request)


def _seek_to_start(name: str) -> pb.SeekRequest:
    request = pb.SeekRequest(subscription=name)
    request.time.seconds = 0
    return request


async def test_topic_schema_records_with_metadata(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("typed")
    topic = await _schema_topic(wire)
    _, name = await wire.subscription(
        topic,
        cloud_storage_config=cs_config(
            "typed", use_topic_schema=True, write_metadata=True, max_messages=1000
        ),
    )
    readings = [json.dumps({"sensor": f"s{i}", "value": i / 2}).encode() for i in range(1000)]
    ids = await wire.publish(topic, *readings)
    [info] = await objects(store(server), "typed", 1)
    schema, records = avro_records(await store(server).read("typed", info.name))
    assert [f["name"] for f in schema["fields"]] == [
        "sensor",
        "value",
        "subscription_name",
        "message_id",
        "publish_time",
        "attributes",
    ]
    assert schema["name"] == "Reading"
    by_id = {r["message_id"]: r for r in records}
    assert sorted(by_id) == sorted(ids)
    assert by_id[ids[3]]["sensor"] == "s3"
    assert by_id[ids[3]]["value"] == 1.5
    assert by_id[ids[3]]["subscription_name"] == name
    assert by_id[ids[3]]["attributes"]["googclient_schemaencoding"] == "JSON"


async def test_use_topic_schema_without_one_is_a_schema_mismatch(
    server: ReferenceServer, wire: Wire
) -> None:
    await store(server).create_bucket("mismatch")
    topic, name = await wire.subscription(
        cloud_storage_config=cs_config("mismatch", use_topic_schema=True)
    )
    assert await _state(wire, name) == CS.SCHEMA_MISMATCH
    await wire.publish(topic, b"waits")
    _advance(server, 2)
    assert server.broker.backlog(name) == 1
    assert await store(server).list("mismatch") == []


def _no_backoff() -> pb.RetryPolicy:
    policy = pb.RetryPolicy()
    policy.minimum_backoff.seconds = 0
    policy.maximum_backoff.seconds = 0
    return policy


async def test_unwritable_messages_go_to_the_dead_letter_topic(
    server: ReferenceServer, wire: Wire
) -> None:
    await store(server).create_bucket("dead")
    topic = await wire.topic()
    dead_topic, dead_sub = await wire.subscription()
    _, name = await wire.subscription(
        topic,
        cloud_storage_config=cs_config("dead", use_topic_schema=True, max_messages=1000),
        dead_letter_policy=pb.DeadLetterPolicy(
            dead_letter_topic=dead_topic, max_delivery_attempts=5
        ),
        retry_policy=_no_backoff(),
    )
    # Published before the topic has its schema: there is no revision to decode it with.
    await wire.publish(topic, b"not a reading")
    assert await _state(wire, name) == CS.SCHEMA_MISMATCH
    schema_topic_name = await _schema_topic(wire)
    schema = (await wire.GetTopic(pb.GetTopicRequest(topic=schema_topic_name))).schema_settings
    await _set_schema(wire, topic, schema)
    _advance(server, 2)  # the export looks at the topic again
    [dead] = await wire.pull(dead_sub, 1)
    assert dead.message.data == b"not a reading"
    assert dead.message.attributes["CloudPubSubDeadLetterSourceDeliveryCount"] == "5"
    status = server.exports.status(name) if server.exports else None
    assert status is not None
    assert status.unwritable == 5
    assert "no schema revision" in status.last_error
    assert await store(server).list("dead") == []


async def test_ordering_keys_stay_in_order_within_a_file(
    server: ReferenceServer, wire: Wire
) -> None:
    await store(server).create_bucket("ordered")
    topic, _ = await wire.subscription(
        enable_message_ordering=True,
        cloud_storage_config=cs_config("ordered", max_messages=1000),
    )
    for start in range(0, 1000, 100):
        key = f"k{start // 100 % 3}"
        await wire.publish(
            topic, *[f"{key}:{i}".encode() for i in range(start, start + 100)], ordering_key=key
        )
    [info] = await objects(store(server), "ordered", 1)
    lines = (await store(server).read("ordered", info.name)).decode().splitlines()
    for key in ("k0", "k1", "k2"):
        numbers = [int(line.split(":")[1]) for line in lines if line.startswith(key + ":")]
        assert numbers == sorted(numbers)
        assert numbers


async def test_filters_seek_detach_and_delete(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("rules")
    topic, name = await wire.subscription(
        filter='attributes.keep = "yes"',
        retain_acked_messages=True,
        cloud_storage_config=cs_config("rules", max_messages=1000),
    )
    messages = [
        pb.PubsubMessage(data=f"{i}".encode(), attributes={"keep": "yes" if i % 2 else "no"})
        for i in range(2000)
    ]
    for start in range(0, 2000, 1000):
        await wire.Publish(pb.PublishRequest(topic=topic, messages=messages[start : start + 1000]))
    [info] = await objects(store(server), "rules", 1)
    lines = (await store(server).read("rules", info.name)).splitlines()
    assert sorted(lines) == sorted(f"{i}".encode() for i in range(1, 2000, 2))
    # A seek back exports them again (at-least-once, as for any subscriber).
    await wire.Seek(_seek_to_start(name))
    found = await objects(store(server), "rules", 2)
    assert len(found) == 2
    # Detached: the export stops.
    await wire.DetachSubscription(pb.DetachSubscriptionRequest(subscription=name))
    await wire.Publish(pb.PublishRequest(topic=topic, messages=messages[:1000]))
    _advance(server, 301)
    _advance(server, 1)
    await eventually(lambda: _async(name not in server.exports.exporting()), "the worker ends")  # type: ignore[union-attr]
    assert len(await store(server).list("rules")) == 2
    # Deleted while a batch is open: nothing is written.
    topic2, name2 = await wire.subscription(cloud_storage_config=cs_config("rules"))
    await wire.publish(topic2, b"never written")
    await eventually(
        lambda: _async(server.exports.status(name2).open_messages == 1),  # type: ignore[union-attr]
        "the batch holds it",
    )
    await wire.DeleteSubscription(pb.DeleteSubscriptionRequest(subscription=name2))
    _advance(server, 301)
    await eventually(lambda: _async(name2 not in server.exports.exporting()), "the worker ends")  # type: ignore[union-attr]
    assert len(await store(server).list("rules")) == 2


async def test_metrics_show_the_exports(server: ReferenceServer, wire: Wire) -> None:
    await store(server).create_bucket("measured")
    topic, name = await wire.subscription(
        cloud_storage_config=cs_config("measured", max_messages=1000)
    )
    await wire.publish(topic, *[b"x"] * 1000)
    await objects(store(server), "measured", 1)
    async with aiohttp.ClientSession() as http, http.get(f"{server.rest_url}/metrics") as got:
        text = await got.text()
    kind, sub = 'kind="cloud_storage"', f'subscription="{name}"'
    assert f"eoclient_subscription_export_objects_total{{{kind},{sub}}} 1.0" in text
    assert f"eoclient_subscription_export_messages_total{{{kind},{sub}}} 1000.0" in text
    assert f"eoclient_subscription_export_bytes_total{{{kind},{sub}}} 2000.0" in text
    assert f'eoclient_subscription_export_state{{{kind},state="ACTIVE",{sub}}} 1.0' in text


async def test_a_subscriptions_message_transforms_apply_to_its_export(
    server: ReferenceServer, wire: Wire
) -> None:
    await store(server).create_bucket("transformed")
    udf = pb.JavaScriptUDF(
        function_name="shout",
        code="function shout(message, metadata) {"
        " if (message.data === 'drop') { return null; }"
        " message.data = message.data.toUpperCase(); return message; }",
    )
    topic, name = await wire.subscription(
        cloud_storage_config=cs_config("transformed", max_messages=1000),
        message_transforms=[pb.MessageTransform(javascript_udf=udf)],
    )
    for _ in range(2):
        await wire.publish(topic, *[b"drop" if i % 2 else b"quiet" for i in range(1000)])
    [info] = await objects(store(server), "transformed", 1)
    assert (await store(server).read("transformed", info.name)).splitlines() == [b"QUIET"] * 1000
    # What the UDF dropped was acknowledged by the transforms' stage: nothing waits.
    await eventually(lambda: _async(server.broker.backlog(name) == 0), "nothing left")
