"""A Cloud Storage export on ``eoclient serve --data-dir``, killed with SIGKILL while a batch
is open: after the restart the batch's messages are given back at once (the lease journal)
and exported again, nothing is lost, and what was in a complete object is not written again
(docs/protocol.md#exports-after-a-crash)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from support.processes import eoclient_serve
from support.wire import Wire

from eoclient._proto import pubsub_pb2 as pb

WAIT = 30.0


def _lines(bucket: Path) -> list[bytes]:
    return [
        line
        for path in sorted(bucket.rglob("*"))
        if path.is_file()
        for line in path.read_bytes().splitlines()
    ]


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_kill_9_with_an_open_batch_loses_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    bucket = data / "buckets" / "crash-out"
    bucket.mkdir(parents=True)
    topic = "projects/crash/topics/exported"
    name = "projects/crash/subscriptions/to-files"
    with eoclient_serve("--data-dir", str(data), "--no-rest") as first:
        address = first.wait_for(r"listening on (\S+) \(gRPC\)").group(1)
        wire = Wire(address)
        await wire.CreateTopic(pb.Topic(name=topic))
        await wire.CreateSubscription(
            pb.Subscription(
                name=name,
                topic=topic,
                cloud_storage_config=pb.CloudStorageConfig(bucket="crash-out", max_messages=1000),
            )
        )
        await wire.publish(topic, *[f"a{i}".encode() for i in range(1000)])
        await wire.publish(topic, *[f"b{i}".encode() for i in range(500)])
        await _until(lambda: len(_lines(bucket)) == 1000, "the first file")
        # The other 500 are in the open batch: leased (for minutes: until the batch would
        # close), journaled. Without the journal they would wait out those leases.
        journals = data / "exports"
        await _until(lambda: any(journals.glob("*.leases")), "the open batch's journal")
        await wire.close()
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(10)
        # stop_process_group at exit finds it dead; the exit status is the kill's.
        first.process.returncode = 0
    with eoclient_serve("--data-dir", str(data), "--no-rest") as second:
        address = second.wait_for(r"listening on (\S+) \(gRPC\)").group(1)
        wire = Wire(address)
        try:
            await wire.publish(topic, *[f"c{i}".encode() for i in range(500)])
            await _until(lambda: len(_lines(bucket)) == 2000, "the second file")
            lines = _lines(bucket)
            expected = [
                f"{p}{i}".encode()
                for p, n in (("a", 1000), ("b", 500), ("c", 500))
                for i in range(n)
            ]
            assert sorted(lines) == sorted(expected)  # each exactly once
            assert list(journals.glob("*.part")) == []
        finally:
            await wire.close()
