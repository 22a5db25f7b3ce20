"""What the Spark tests share: subscriptions, publishing, reading the sink, and ``Driver``,
the crash driver (``_driver.py``) run in a process group of its own and killed with SIGKILL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eoclient.admin import AdminClient
from eoclient.publisher import PublisherClient
from eoclient.subscriber import SubscriberClient

from ._driver import MASTER_ENV, start_query

DRIVER = Path(__file__).with_name("_driver.py")
PROJECT = "spark-tests"

# The negative controls (a protection switched off must let the crash tests find duplicates:
# they can fail) take a minute or two each: run when this is set (CI time, brief), e.g.
# EOCLIENT_SPARK_NEGATIVE_CONTROLS=1 .venv/bin/pytest tests/spark -k negative
negative_control = pytest.mark.skipif(
    os.environ.get("EOCLIENT_SPARK_NEGATIVE_CONTROLS") != "1",
    reason="a negative control: set EOCLIENT_SPARK_NEGATIVE_CONTROLS=1 to run it",
)


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:10]
    return (
        f"projects/{PROJECT}/topics/topic-{suffix}",
        f"projects/{PROJECT}/subscriptions/sub-{suffix}",
    )


def make_subscription(endpoint: str, *, exactly_once: bool = True) -> tuple[str, str]:
    topic, subscription = _names()

    async def create() -> None:
        async with AdminClient(endpoint) as admin:
            await admin.create_topic(topic)
            await admin.create_subscription(
                subscription,
                topic,
                ack_deadline_seconds=10,
                enable_exactly_once_delivery=exactly_once,
            )

    asyncio.run(create())
    return topic, subscription


def publish(endpoint: str, topic: str, count: int) -> list[str]:
    async def run() -> list[str]:
        async with PublisherClient(endpoint) as client:
            futures = [
                client.publish_nowait(topic, f"event-{i}".encode(), key=str(i % 7))
                for i in range(count)
            ]
            return list(await asyncio.gather(*futures))

    return asyncio.run(run())


def drain(endpoint: str, subscription: str, expected: int) -> list[Any]:
    """Pull and ack until ``expected`` messages arrived (or two empty pulls in a row)."""

    async def run() -> list[Any]:
        received: list[Any] = []
        empty = 0
        async with SubscriberClient(endpoint) as client:
            while len(received) < expected and empty < 2:
                messages = await client.pull(subscription, 1000)
                empty = 0 if messages else empty + 1
                for message in messages:
                    await message.ack_with_response()
                received.extend(messages)
        return received

    return asyncio.run(run())


def sink_ids(spark: Any, out: Path) -> Counter[str]:
    """The message ids in a file sink, read through its metadata log (only committed files)."""
    assert (out / "_spark_metadata").is_dir(), "not a file sink with a metadata log"
    rows = spark.read.parquet(str(out)).select("message_id").collect()
    return Counter(row.message_id for row in rows)


def exactly_once_errors(found: Counter[str], published: list[str]) -> list[str]:
    """Why ``found`` is not exactly ``published``, once each ([] when it is)."""
    errors = []
    duplicates = {k: n for k, n in found.items() if n > 1}
    missing = set(published) - set(found)
    extra = set(found) - set(published)
    if duplicates:
        errors.append(f"{len(duplicates)} ids more than once, e.g. {sorted(duplicates)[:3]}")
    if missing:
        errors.append(f"{len(missing)} ids missing, e.g. {sorted(missing)[:3]}")
    if extra:
        errors.append(f"{len(extra)} ids never published, e.g. {sorted(extra)[:3]}")
    return errors


def run_stream(spark: Any, subscription: str, work: Path, **options: str) -> None:
    query = start_query(spark, subscription, work, options)
    query.awaitTermination(120)
    if query.exception() is not None:
        raise query.exception()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        # pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
        return int(stat.read().rsplit(")", 1)[1].split()[1])


def _command(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
        return cmdline.read().replace(b"\0", b" ").decode(errors="replace")


def kill_executor(worker_pid: int) -> list[int]:
    """kill -9 the executor a Python worker runs for: its JVM, the worker's daemon and the
    worker (the pids killed, the JVM's first).

    A chain already dying is not an error: two fault points may stop two workers of one
    executor, and killing it for the first takes the second's daemon and worker with it, so
    a process in the chain may vanish between reading /proc and sending its signal."""
    chain = [worker_pid]
    try:
        while "CoarseGrainedExecutorBackend" not in (command := _command(chain[-1])):
            if not command:
                return []  # a zombie (its cmdline is empty): it has died already
            chain.append(_parent(chain[-1]))
            assert chain[-1] > 1, f"no executor JVM above Python worker {worker_pid}"
    except (FileNotFoundError, ProcessLookupError):
        return []  # the worker or one above it is gone: its executor was killed already
    killed = []
    for pid in reversed(chain):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        killed.append(pid)
    return killed


class Driver:
    """``_driver.py`` in its own process group, killed with SIGKILL at a fault point."""

    def __init__(self, endpoint: str, subscription: str, work: Path, *, master: str = "") -> None:
        self.endpoint, self.subscription, self.work = endpoint, subscription, work
        self.master = master
        self.faults = work / "faults"
        self.faults.mkdir(parents=True, exist_ok=True)

    def run(
        self,
        *options: str,
        crash_at: str = "",
        points: str = "",
        pause_at: str = "",
        on_pause: Callable[[], None] | None = None,
        kill_when: Path | Callable[[], bool] | None = None,
        watch: Callable[[], None] | None = None,
        timeout: float = 180.0,
    ) -> str:
        """Run until done ("done"), or until the fault point ``crash_at`` fires or
        ``kill_when`` (a file appearing, or a check) holds, and then kill it ("killed"). At
        the fault point ``pause_at`` the driver waits while ``on_pause()`` runs, then goes
        on. ``points``: more fault points (``name:count,...``), which ``watch()`` (run every
        50 ms) may act on: kill an executor stopped at one, say."""
        env = dict(os.environ)
        env.pop("PUBSUB_EMULATOR_HOST", None)
        if self.master:
            env[MASTER_ENV] = self.master
        log = (self.work / f"driver-{time.monotonic_ns()}.log").open("wb")
        points = ",".join(filter(None, [crash_at, points, f"{pause_at}:pause" if pause_at else ""]))
        process = subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                self.endpoint,
                self.subscription,
                str(self.work),
                *options,
                f"faultDir={self.faults}",
                f"faultPoints={points}",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        marker = self.faults / crash_at.split(":")[0] if crash_at else None
        paused = self.faults / f"{pause_at.split(':')[0]}.paused" if pause_at else None
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if paused is not None and paused.exists():
                    if on_pause is not None:
                        on_pause()
                    paused.with_suffix(".resume").touch()
                    paused = None
                if watch is not None:
                    watch()
                if (
                    (marker is not None and marker.exists())
                    or (isinstance(kill_when, Path) and kill_when.exists())
                    or (callable(kill_when) and kill_when())
                ):
                    # The whole driver: its JVM, the source runner, local-cluster executors.
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
                    return "killed"
                if process.poll() is not None:
                    text = Path(log.name).read_text(errors="replace")
                    assert process.returncode == 0, text[-3000:]
                    # local_session turns adaptive execution off: no warning per query.
                    assert "is not supported in streaming" not in text, text[-3000:]
                    return "done"
                time.sleep(0.05)
            raise AssertionError(f"driver still running after {timeout} s")
        finally:
            log.close()
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
