"""Cloud Storage exports as a user of Google's libraries meets them: subscriptions created
with google-cloud-pubsub (gRPC and REST), 2,500 messages published with it, the objects read
back with google-cloud-storage from a real Cloud Storage emulator the server reaches through
``STORAGE_EMULATOR_HOST`` — and the same through bucket directories; every message exactly
once, object names by the grammar, the Avro schema field for field; NOT_FOUND for a missing
bucket; INVALID_ARGUMENT for the limits."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from google.api_core import exceptions
from google.cloud import pubsub_v1
from google.protobuf import duration_pb2
from support.official_clients import OfficialClients, in_thread
from support.storage_emulator import storage_client, storage_emulator

from eoclient._clock import FakeClock
from eoclient.server_stub.exports.files import PUBSUB_MESSAGE_WITH_METADATA_SCHEMA
from eoclient.server_stub.server import ReferenceServer, run_server

from .support import eventually

PROJECT = "exports-test"
CS = pubsub_v1.types.CloudStorageConfig
COUNT = 2500


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    with storage_emulator() as url:
        yield url


@pytest.fixture(params=["emulator", "directory"])
async def backend(
    request: pytest.FixtureRequest,
    emulator_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[ReferenceServer, str]]:
    if request.param == "emulator":
        monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_url)
    else:
        monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    async with run_server(clock=FakeClock(), buckets_dir=tmp_path / "buckets") as server:
        yield server, request.param


def _names(tag: str) -> tuple[str, str, str]:
    return (
        f"projects/{PROJECT}/topics/{tag}",
        f"projects/{PROJECT}/subscriptions/{tag}-avro",
        f"projects/{PROJECT}/subscriptions/{tag}-text",
    )


async def _read_objects(
    server: ReferenceServer, backend: str, emulator_url: str, bucket: str
) -> dict[str, bytes]:
    if backend == "emulator":  # read back as an application would: Google's client
        client = storage_client(emulator_url)
        blobs = await in_thread(lambda: list(client.list_blobs(bucket)))
        return {blob.name: await in_thread(blob.download_as_bytes) for blob in blobs}
    assert server.buckets is not None
    return {
        info.name: await server.buckets.read(bucket, info.name)
        for info in await server.buckets.list(bucket)
    }


async def test_2500_messages_exported_exactly_once(
    backend: tuple[ReferenceServer, str], emulator_url: str, tmp_path: Path
) -> None:
    server, kind = backend
    bucket = f"exports-{kind}-{abs(hash(tmp_path)) % 10**8}"
    assert server.buckets is not None
    await server.buckets.create_bucket(bucket)
    topic, avro_sub, text_sub = _names(f"t{abs(hash(tmp_path)) % 10**8}")
    clients = OfficialClients(server, "grpc")
    try:
        await in_thread(lambda: clients.publisher.create_topic(name=topic))
        await in_thread(
            lambda: clients.subscriber.create_subscription(
                request={
                    "name": avro_sub,
                    "topic": topic,
                    "cloud_storage_config": CS(
                        bucket=bucket,
                        filename_prefix="avro/",
                        filename_suffix=".avro",
                        filename_datetime_format="YYYY-MM-DD/hh_mm_ssZ",
                        avro_config=CS.AvroConfig(write_metadata=True),
                        max_messages=1000,
                    ),
                }
            )
        )
        await in_thread(
            lambda: clients.subscriber.create_subscription(
                request={
                    "name": text_sub,
                    "topic": topic,
                    "cloud_storage_config": CS(
                        bucket=bucket,
                        filename_prefix="text/",
                        filename_datetime_format="YYYY-MM-DDThh_mm_ss-",
                        max_messages=1000,
                        max_duration=duration_pb2.Duration(seconds=120),
                    ),
                }
            )
        )
        futures = [
            clients.publisher.publish(topic, f"message {i}".encode(), n=str(i))
            for i in range(COUNT)
        ]
        ids = [await in_thread(future.result) for future in futures]
        assert server.buckets is not None

        async def four_full_files() -> bool:
            return len(await server.buckets.list(bucket)) >= 4  # type: ignore[union-attr]

        await eventually(four_full_files, "two files of 1000 for each subscription")
        assert isinstance(server.clock, FakeClock)
        server.clock.advance(121)  # the text files' max_duration
        server.tick()

        async def five_files() -> bool:
            return len(await server.buckets.list(bucket)) >= 5  # type: ignore[union-attr]

        await eventually(five_files, "the last text file, by duration")
        server.clock.advance(180)  # the Avro files' max_duration (the default, 5 minutes)
        server.tick()

        async def six_files() -> bool:
            return len(await server.buckets.list(bucket)) >= 6  # type: ignore[union-attr]

        await eventually(six_files, "the last Avro file, by duration")
        await asyncio.sleep(0.3)
        found = await _read_objects(server, kind, emulator_url, bucket)
        assert len(found) == 6
        avro_names = sorted(n for n in found if n.startswith("avro/"))
        text_names = sorted(n for n in found if n.startswith("text/"))
        for name in avro_names:
            assert re.fullmatch(r"avro/\d{4}-\d\d-\d\d/\d\d_\d\d_\d\dZ_[0-9a-f]{32}\.avro", name)
        for name in text_names:
            assert re.fullmatch(r"text/\d{4}-\d\d-\d\dT\d\d_\d\d_\d\d-[0-9a-f]{32}", name)

        records: list[dict[str, Any]] = []
        for name in avro_names:
            reader = fastavro.reader(io.BytesIO(found[name]))
            assert json.loads(reader.metadata["avro.schema"]) == PUBSUB_MESSAGE_WITH_METADATA_SCHEMA
            records += list(reader)
        assert sorted(r["message_id"] for r in records) == sorted(ids)
        one = next(r for r in records if r["message_id"] == ids[7])
        assert one["data"] == b"message 7"
        assert one["attributes"] == {"n": "7"}
        assert one["subscription_name"] == avro_sub
        assert one["publish_time"].timestamp() == pytest.approx(server.clock.now() - 301, abs=5)

        lines = [line for name in text_names for line in found[name].splitlines()]
        assert sorted(lines) == sorted(f"message {i}".encode() for i in range(COUNT))
        assert sorted(len(found[name].splitlines()) for name in text_names) == [500, 1000, 1000]
    finally:
        clients.close()


@pytest.mark.parametrize("transport", ["grpc", "rest"])
async def test_not_found_and_the_limits(
    transport: str, emulator_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_url)
    async with run_server() as server:
        clients = OfficialClients(server, transport)  # type: ignore[arg-type]
        try:
            topic = f"projects/{PROJECT}/topics/limits-{transport}"
            await in_thread(lambda: clients.publisher.create_topic(name=topic))
            name = f"projects/{PROJECT}/subscriptions/missing-{transport}"
            created = await in_thread(
                lambda: clients.subscriber.create_subscription(
                    request={
                        "name": name,
                        "topic": topic,
                        "cloud_storage_config": CS(bucket="no-such-bucket"),
                    }
                )
            )
            assert created.cloud_storage_config.state == CS.State.NOT_FOUND
            got = await in_thread(lambda: clients.subscriber.get_subscription(subscription=name))
            assert got.cloud_storage_config.state == CS.State.NOT_FOUND
            bad_configs: list[tuple[dict[str, Any], str]] = [
                ({"max_duration": duration_pb2.Duration(seconds=30)}, "max_duration"),
                ({"max_messages": 500}, "max_messages"),
                ({"filename_suffix": "dir/"}, "filename_suffix"),
                ({"filename_datetime_format": "YYYY-YYYY"}, "filename_datetime_format"),
            ]
            for number, (fields, field) in enumerate(bad_configs):
                # INVALID_ARGUMENT: 400 Bad Request over REST.
                with pytest.raises(exceptions.BadRequest, match=field):
                    await in_thread(
                        lambda fields=fields, number=number: clients.subscriber.create_subscription(
                            request={
                                "name": f"{name}-bad{number}",
                                "topic": topic,
                                "cloud_storage_config": CS(bucket="no-such-bucket", **fields),
                            }
                        )
                    )
        finally:
            clients.close()


async def test_the_create_cloudstorage_subscription_sample(
    emulator_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What python-pubsub's sample ``create_cloudstorage_subscription`` and its test do: a
    bucket made with google-cloud-storage, a subscription with Avro, write_metadata,
    max_bytes 10,000,000 and max_duration 300 s, read back; the bucket deleted afterwards
    (empty: nothing was published)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_url)
    async with run_server() as server:
        clients = OfficialClients(server, "grpc")
        storage = storage_client(emulator_url)
        bucket = await in_thread(lambda: storage.create_bucket("python_samples_bucket_3_11_abc"))
        try:
            topic = f"projects/{PROJECT}/topics/samples-unused"
            name = f"projects/{PROJECT}/subscriptions/samples-cloudstorage"
            await in_thread(lambda: clients.publisher.create_topic(name=topic))
            config = CS(
                bucket=bucket.name,
                filename_prefix="log_events_",
                filename_suffix=".avro",
                avro_config=CS.AvroConfig(write_metadata=True),
                max_duration=duration_pb2.Duration(seconds=300),
                max_bytes=10_000_000,
            )
            created = await in_thread(
                lambda: clients.subscriber.create_subscription(
                    request={"name": name, "topic": topic, "cloud_storage_config": config}
                )
            )
            assert created.cloud_storage_config.bucket == bucket.name
            assert created.cloud_storage_config.state == CS.State.ACTIVE
            assert created.cloud_storage_config.avro_config.write_metadata
            assert created.cloud_storage_config.max_bytes == 10_000_000
            await in_thread(lambda: clients.subscriber.delete_subscription(subscription=name))
        finally:
            await in_thread(bucket.delete)
            clients.close()
