"""The bucket stores (``server_stub/buckets``): the same checks on bucket directories and on
the Cloud Storage JSON API of a real emulator (``gcp-storage-emulator``), then what is each
store's own — files and subdirectories, staging, metadata across a restart; objects read
back with Google's ``google-cloud-storage``."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from support.storage_emulator import storage_client, storage_emulator

from eoclient.server_stub.buckets import (
    BucketError,
    BucketNotFound,
    BucketStore,
    InvalidName,
    JsonApiBuckets,
    LocalBuckets,
    ObjectNotFound,
    open_bucket_store,
)
from eoclient.server_stub.buckets.local import STAGING


@pytest.fixture(scope="module")
def emulator_url() -> Iterator[str]:
    with storage_emulator() as url:
        yield url


@pytest.fixture(params=["local", "json_api"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path, emulator_url: str
) -> AsyncIterator[BucketStore]:
    made: BucketStore
    if request.param == "local":
        made = LocalBuckets(tmp_path / "buckets")
    else:
        made = JsonApiBuckets(emulator_url)
    try:
        yield made
    finally:
        await made.aclose()
        await made.aclose()  # idempotent


def _bucket(tmp_path: Path) -> str:
    # One emulator serves the module: a bucket name of the test's own.
    return f"b-{abs(hash(tmp_path)) % 10**12}"


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        await asyncio.sleep(0)
        yield part


async def test_buckets_exist_once_created(store: BucketStore, tmp_path: Path) -> None:
    bucket = _bucket(tmp_path)
    assert not await store.exists(bucket)
    await store.create_bucket(bucket)
    assert await store.exists(bucket)
    with pytest.raises(BucketError):
        await store.create_bucket(bucket)
    await store.create_bucket(bucket, exist_ok=True)
    with pytest.raises(InvalidName):
        await store.exists("A_Bad..Name")


async def test_write_list_stat_read(store: BucketStore, tmp_path: Path) -> None:
    bucket = _bucket(tmp_path)
    await store.create_bucket(bucket)
    before = time.time()
    first = await store.write_bytes(bucket, "logs/2024-01-02T03:04:05+00:00_a.txt", b"one\ntwo\n")
    second = await store.write_chunks(
        bucket, "logs/b.avro", _chunks(b"x" * 70_000, b"y" * 5), content_type="application/avro"
    )
    source = tmp_path / "source.bin"
    source.write_bytes(b"z" * 1000)
    third = await store.write_file(bucket, "other", source, content_type="text/plain")
    assert source.exists()  # copied, not moved
    assert (first.bucket, first.name, first.size) == (
        bucket,
        "logs/2024-01-02T03:04:05+00:00_a.txt",
        8,
    )
    assert second.size == 70_005
    assert third.size == 1000
    assert before - 2 <= first.created <= time.time() + 2
    assert second.content_type == "application/avro"

    listed = await store.list(bucket)
    assert [info.name for info in listed] == [
        "logs/2024-01-02T03:04:05+00:00_a.txt",
        "logs/b.avro",
        "other",
    ]
    assert listed[0] == await store.stat(bucket, listed[0].name)
    assert [info.name for info in await store.list(bucket, "logs/b")] == ["logs/b.avro"]
    assert [info.name for info in await store.list(bucket, "lo")] == [
        "logs/2024-01-02T03:04:05+00:00_a.txt",
        "logs/b.avro",
    ]
    assert await store.list(bucket, "nothing/") == []

    assert await store.read(bucket, first.name) == b"one\ntwo\n"
    pieces = [chunk async for chunk in store.read_chunks(bucket, "logs/b.avro", 4096)]
    assert b"".join(pieces) == b"x" * 70_000 + b"y" * 5
    assert all(len(piece) <= 4096 for piece in pieces)


async def test_a_rewrite_is_a_new_generation(store: BucketStore, tmp_path: Path) -> None:
    bucket = _bucket(tmp_path)
    await store.create_bucket(bucket)
    first = await store.write_bytes(bucket, "same", b"1")
    second = await store.write_bytes(bucket, "same", b"22")
    assert second.generation > first.generation
    assert (await store.stat(bucket, "same")).size == 2
    assert await store.read(bucket, "same") == b"22"


async def test_missing_bucket_and_object(store: BucketStore, tmp_path: Path) -> None:
    bucket = _bucket(tmp_path)
    with pytest.raises(BucketNotFound) as missing:
        await store.write_bytes(bucket, "a", b"data")
    assert missing.value.bucket == bucket
    with pytest.raises(BucketNotFound):
        await store.list(bucket)
    with pytest.raises(BucketNotFound):
        await store.read(bucket, "a")
    await store.create_bucket(bucket)
    with pytest.raises(ObjectNotFound) as gone:
        await store.read(bucket, "a")
    assert (gone.value.bucket, gone.value.name) == (bucket, "a")
    with pytest.raises(ObjectNotFound):
        await store.stat(bucket, "a")
    with pytest.raises(ObjectNotFound):
        [chunk async for chunk in store.read_chunks(bucket, "a")]
    with pytest.raises(InvalidName):
        await store.write_bytes(bucket, "bad\nname", b"x")


# ------------------------------------------------------------ bucket directories


async def test_directories_hold_plain_files(tmp_path: Path) -> None:
    root = tmp_path / "buckets"
    store = LocalBuckets(root)
    await store.create_bucket("exports")
    await store.write_bytes("exports", "2024-01-02/03_04_05_abc.txt", b"hello\n")
    assert (root / "exports" / "2024-01-02" / "03_04_05_abc.txt").read_bytes() == b"hello\n"
    # The staging directory is not a bucket, and nothing is left in it.
    assert sorted(os.listdir(root)) == [STAGING, "exports"]
    assert os.listdir(root / STAGING) == []
    # A file copied in by hand is an object like any other.
    (root / "exports" / "dropped.json").write_text("{}")
    info = await store.stat("exports", "dropped.json")
    assert info.size == 2
    assert info.content_type == "application/json"
    assert [i.name for i in await store.list("exports")] == [
        "2024-01-02/03_04_05_abc.txt",
        "dropped.json",
    ]
    assert await open_bucket_store(root).exists("exports")


async def test_metadata_survives_a_restart(tmp_path: Path) -> None:
    root = tmp_path / "buckets"
    first = LocalBuckets(root)
    await first.create_bucket("keep")
    written = await first.write_bytes("keep", "a/b.avro", b"data")
    again = LocalBuckets(root)
    assert await again.stat("keep", "a/b.avro") == written
    assert (await again.list("keep")) == [written]


async def test_objects_appear_whole(tmp_path: Path) -> None:
    root = tmp_path / "buckets"
    store = LocalBuckets(root)
    await store.create_bucket("whole")
    seen_during: list[bool] = []

    async def slow() -> AsyncIterator[bytes]:
        yield b"first half,"
        seen_during.append((root / "whole" / "obj").exists())
        seen_during.append(bool(await store.list("whole")))
        yield b" second half"

    await store.write_chunks("whole", "obj", slow())
    assert seen_during == [False, False]
    assert (root / "whole" / "obj").read_bytes() == b"first half, second half"


async def test_move_renames_and_names_a_directory_cannot_hold(tmp_path: Path) -> None:
    store = LocalBuckets(tmp_path / "buckets")
    await store.create_bucket("moves")
    source = tmp_path / "batch.tmp"
    source.write_bytes(b"abc")
    await store.write_file("moves", "x/y", source, move=True)
    assert not source.exists()
    for bad in ("/lead", "trail/", "a//b", "a/../b", "./a"):
        with pytest.raises(InvalidName):
            await store.write_bytes("moves", bad, b"-")
    with pytest.raises(InvalidName):
        await store.write_bytes("moves", "x", b"a directory already")
    with pytest.raises(InvalidName):
        await store.write_bytes("moves", "x/y/z", b"under a file")


async def test_stale_staging_files_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "buckets"
    LocalBuckets(root)
    stale, fresh = root / STAGING / "old.part", root / STAGING / "new.part"
    stale.write_bytes(b"left by a crash")
    fresh.write_bytes(b"being written by another server")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    LocalBuckets(root)
    assert not stale.exists()
    assert fresh.exists()


# ----------------------------------------------------------- the JSON API


async def test_google_client_reads_what_the_store_wrote(emulator_url: str, tmp_path: Path) -> None:
    bucket = _bucket(tmp_path)
    store = JsonApiBuckets(emulator_url.removeprefix("http://"))  # no scheme: plain HTTP
    try:
        await store.create_bucket(bucket)
        name = "p_2024-01-02T03:04:05+00:00_u/ü.txt"
        info = await store.write_bytes(bucket, name, b"payload", content_type="text/plain")
        client = storage_client(emulator_url)
        [blob] = list(client.list_blobs(bucket))
        assert blob.name == name
        assert blob.generation == info.generation
        assert abs(blob.time_created.timestamp() - info.created) < 0.001
        assert blob.download_as_bytes() == b"payload"
        client.bucket(bucket).blob("by-google").upload_from_string(b"from google")
        assert await store.read(bucket, "by-google") == b"from google"
    finally:
        await store.aclose()


async def test_the_environment_picks_the_json_api(
    emulator_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_url)
    store = open_bucket_store(tmp_path / "unused")
    assert isinstance(store, JsonApiBuckets)
    assert "Cloud Storage JSON API" in store.describe()
    await store.aclose()
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    assert isinstance(open_bucket_store(tmp_path / "used"), LocalBuckets)


async def test_an_unreachable_emulator_is_a_bucket_error() -> None:
    store = JsonApiBuckets("http://127.0.0.1:9")  # the discard port: nothing listens
    try:
        with pytest.raises(BucketError):
            await store.exists("anything")
    finally:
        await store.aclose()
