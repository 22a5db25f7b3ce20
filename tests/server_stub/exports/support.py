"""Helpers of the export tests: a server on a FakeClock with bucket directories, Cloud
Storage configs, waiting for objects, reading Avro files."""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import fastavro

from eoclient._proto import pubsub_pb2 as pb
from eoclient.server_stub.buckets import BucketStore, ObjectInfo

WAIT = 15.0


def cs_config(bucket: str, **fields: Any) -> pb.CloudStorageConfig:
    """A CloudStorageConfig; ``avro=True``/``write_metadata``/``use_topic_schema`` pick Avro,
    ``max_duration`` is seconds."""
    avro = fields.pop("avro", False)
    write_metadata = fields.pop("write_metadata", False)
    use_topic_schema = fields.pop("use_topic_schema", False)
    duration = fields.pop("max_duration", None)
    config = pb.CloudStorageConfig(bucket=bucket, **fields)
    if avro or write_metadata or use_topic_schema:
        config.avro_config.write_metadata = write_metadata
        config.avro_config.use_topic_schema = use_topic_schema
    if duration is not None:
        config.max_duration.seconds = duration
    return config


async def eventually(
    check: Callable[[], Awaitable[bool]], what: str, timeout: float = WAIT
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.05)


async def objects(
    store: BucketStore, bucket: str, count: int, timeout: float = WAIT
) -> list[ObjectInfo]:
    """Wait until ``bucket`` holds ``count`` objects; them."""
    found: list[ObjectInfo] = []

    async def enough() -> bool:
        nonlocal found
        found = await store.list(bucket)
        return len(found) >= count

    await eventually(enough, f"{count} objects in {bucket}", timeout)
    assert len(found) == count, [o.name for o in found]
    return found


def avro_records(data: bytes) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The schema written in an Avro container file (as written, not as fastavro
    normalizes it) and its records, read by fastavro."""
    reader = fastavro.reader(io.BytesIO(data))
    records = list(reader)
    return json.loads(reader.metadata["avro.schema"]), records  # type: ignore[return-value]
