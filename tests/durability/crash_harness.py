"""Publishers, exactly-once subscribers and an admin client against ``eoclient serve
--data-dir``, while the server is killed with SIGKILL and restarted on the same directory.

What the clients observe is checked against the durability promises (``violations``):

* every message id a publisher received is delivered (nothing answered is lost);
* no message is delivered after an ack of it returned SUCCESS, and none gets two SUCCESSes;
* every message ends acked SUCCESS once — or, when the server died after committing an
  ack and before answering it, with that ack answered OTHER and the message never
  delivered again: the exactly-once contract's "ambiguous" outcome, counted apart (the
  durable server keeps ack ids valid across its restarts, so a retried ack finds its
  answer: ``exactly_once_violations`` counts an ambiguous outcome as a violation);
* every topic, subscription and snapshot whose creation was answered still exists.

Used by ``test_crash.py`` (CI-sized, and its negative control with the server answering
before it commits) and by ``benchmarks/crash_soak.py`` (the long form).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eoclient import (
    AcknowledgeStatus,
    AckRetrySettings,
    AdminClient,
    FlowControl,
    Message,
    PublisherClient,
    PublishRetrySettings,
    StreamSettings,
    SubscriberClient,
)
from eoclient.errors import EoclientError
from eoclient.server_stub.group_commit import UNSAFE_COMMIT_INTERVAL

PROJECT = "projects/crash-test"
TOPIC = f"{PROJECT}/topics/work"
SUBSCRIPTION = f"{PROJECT}/subscriptions/work-eod"
SERVE_START_TIMEOUT = 30.0


class ServerProcess:
    """``eoclient serve --data-dir`` on a fixed port, killed and restarted at will."""

    def __init__(self, data_dir: Path, port: int, *, unsafe: bool = False) -> None:
        self.data_dir = data_dir
        self.port = port
        self.unsafe = unsafe
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.log = data_dir.parent / f"{data_dir.name}-serve.log"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        env = dict(os.environ)
        env.pop("PUBSUB_EMULATOR_HOST", None)
        if self.unsafe:
            env["EOCLIENT_TEST_ANSWER_BEFORE_COMMIT"] = "1"
        with self.log.open("ab") as out:
            out.write(f"--- start {self.starts + 1}\n".encode())
            out.flush()
            offset = out.tell()
            command = ["serve", "--no-rest", "--port", str(self.port)]
            self.process = await asyncio.create_subprocess_exec(
                *[sys.executable, "-m", "eoclient.cli", *command, "--data-dir", str(self.data_dir)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        deadline = time.monotonic() + SERVE_START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            if re.search(r"export PUBSUB_EMULATOR_HOST=", text):
                self.starts += 1
                return
            if self.process.returncode is not None:
                raise RuntimeError(f"eoclient serve exited at start {self.starts + 1}:\n{text}")
            await asyncio.sleep(0.02)
        raise RuntimeError(f"eoclient serve did not start in {SERVE_START_TIMEOUT} s")

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                await self.kill()


@dataclass
class Observations:
    published: dict[str, float] = field(default_factory=dict)  # id -> when answered
    deliveries: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    successes: defaultdict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    last_status: dict[str, AcknowledgeStatus] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)  # resources whose creation was answered
    existing: set[str] = field(default_factory=set)  # resources listed at the end
    publish_failures: int = 0
    kills: int = 0

    def ambiguous(self) -> list[str]:
        """Published ids never answered SUCCESS whose last ack was answered OTHER."""
        return [
            m
            for m in self.published
            if not self.successes.get(m) and self.last_status.get(m) is AcknowledgeStatus.OTHER
        ]

    def settled(self) -> int:
        return sum(1 for m in self.published if self.successes.get(m)) + len(self.ambiguous())


def violations(seen: Observations) -> list[str]:
    found: list[str] = []
    for message_id in seen.published:
        if not seen.deliveries.get(message_id):
            found.append(f"message {message_id} was published (answered) but never delivered")
    for message_id, times in seen.successes.items():
        if len(times) > 1:
            found.append(f"message {message_id} was acked SUCCESS {len(times)} times")
        later = [t for t in seen.deliveries.get(message_id, []) if t > times[0]]
        if later:
            found.append(
                f"message {message_id} was delivered {len(later)} time(s) after its ack "
                "returned SUCCESS"
            )
    unsettled = [
        m for m in seen.published if not seen.successes.get(m) and m not in seen.ambiguous()
    ]
    found.extend(f"message {m} never ended acked" for m in unsettled)
    found.extend(
        f"{name} was created (answered) but is gone"
        for name in seen.created
        if name not in seen.existing
    )
    return found


def exactly_once_violations(seen: Observations) -> list[str]:
    """``violations``, and every message must end with exactly one SUCCESS: none may be
    left ambiguous (its ack committed, the answer lost with the server)."""
    found = violations(seen)
    found.extend(
        f"message {m} ended without a SUCCESS (its last ack answered OTHER)"
        for m in seen.ambiguous()
    )
    return found


async def _publish(
    address: str, seen: Observations, messages: int, seconds: float, stop: asyncio.Event
) -> None:
    """``messages`` in bursts of 25, spread over about ``seconds`` (the kills' span)."""
    pause = seconds / max(messages / 25, 1)
    # Short backoffs: the server is down about half the time (the defaults grow to 60 s).
    retry = PublishRetrySettings(max_backoff=0.5)
    async with PublisherClient(address, retry=retry) as publisher:
        pending: set[asyncio.Future[str]] = set()

        def answered(future: asyncio.Future[str]) -> None:
            pending.discard(future)
            if future.cancelled() or future.exception() is not None:
                seen.publish_failures += 1
            else:
                seen.published[future.result()] = time.monotonic()

        for n in range(messages):
            future = publisher.publish_nowait(TOPIC, f"message {n}".encode())
            pending.add(future)
            future.add_done_callback(answered)
            if n % 25 == 24 and not stop.is_set():  # once the kills are over: the rest at once
                await asyncio.sleep(pause)
        if pending:
            await asyncio.wait(pending)


async def _subscribe(address: str, seen: Observations) -> None:
    async def handle(message: Message) -> None:
        seen.deliveries[message.message_id].append(time.monotonic())
        status = await message.ack_with_response()
        seen.last_status[message.message_id] = status
        if status is AcknowledgeStatus.SUCCESS:
            seen.successes[message.message_id].append(time.monotonic())

    while True:  # a fatal session error (a long outage) starts a new client
        with contextlib.suppress(EoclientError):
            async with SubscriberClient(address) as client:
                await client.run(
                    SUBSCRIPTION,
                    handle,
                    flow_control=FlowControl(max_messages=500),
                    stream=StreamSettings(reconnect_max_backoff=0.5),
                    ack_retry=AckRetrySettings(max_backoff=0.5),
                )
        await asyncio.sleep(0.2)


async def _create_resources(address: str, seen: Observations, stop: asyncio.Event) -> None:
    n = 0
    async with AdminClient(address, timeout=5.0) as admin:
        while not stop.is_set():
            n += 1
            topic = f"{PROJECT}/topics/extra-{n}"
            subscription = f"{PROJECT}/subscriptions/extra-{n}"
            snapshot = f"{PROJECT}/snapshots/extra-{n}"
            with contextlib.suppress(EoclientError):
                await admin.create_topic(topic)
                seen.created.append(topic)
                await admin.create_subscription(subscription, topic)
                seen.created.append(subscription)
                await admin.create_snapshot(snapshot, subscription)
                seen.created.append(snapshot)
            await asyncio.sleep(0.15)


async def _kill_repeatedly(
    server: ServerProcess, seen: Observations, kills: int, rng: random.Random
) -> None:
    for _ in range(kills):
        await asyncio.sleep(rng.uniform(0.4, 1.2))
        await server.kill()
        seen.kills += 1
        await server.start()


async def _kill_when_settled(
    server: ServerProcess, seen: Observations, fractions: Sequence[float], total: int
) -> None:
    """A kill each time the settled messages reach one of ``fractions`` of ``total``:
    mid-consumption, with acks in flight."""
    for fraction in fractions:
        while seen.settled() < fraction * total:  # noqa: ASYNC110 - polling the clients
            await asyncio.sleep(0.01)
        await server.kill()
        seen.kills += 1
        await server.start()


async def run(
    directory: Path,
    port: int,
    *,
    messages: int,
    kills: int,
    seed: int,
    unsafe: bool = False,
    drain_timeout: float = 60.0,
    ack_deadline: int = 10,
    kill_when_settled: Sequence[float] = (),
    create_resources: bool = True,
) -> Observations:
    """The whole scenario; returns what the clients saw (the server is stopped after).

    ``ack_deadline``: the subscription's (a delivery lost with a killed server waits for
    its lease to run out); ``kill_when_settled``: kill at these fractions of the messages
    settled instead of ``kills`` times at random; ``create_resources``: admin calls
    meanwhile.
    """
    rng = random.Random(seed)
    seen = Observations()
    server = ServerProcess(directory / "data", port, unsafe=unsafe)
    await server.start()
    try:
        async with AdminClient(server.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(
                SUBSCRIPTION,
                TOPIC,
                enable_exactly_once_delivery=True,
                ack_deadline_seconds=ack_deadline,
            )
        seen.created += [TOPIC, SUBSCRIPTION]
        if unsafe:  # let the set-up reach the disk, so what gets lost is the traffic's
            await asyncio.sleep(UNSAFE_COMMIT_INTERVAL + 0.5)
        stop = asyncio.Event()
        async with asyncio.TaskGroup() as group:
            spread = 0.0 if kill_when_settled else kills * 0.8
            publisher = group.create_task(_publish(server.address, seen, messages, spread, stop))
            subscribers = [group.create_task(_subscribe(server.address, seen)) for _ in range(2)]
            if create_resources:
                admin_task = group.create_task(_create_resources(server.address, seen, stop))
            if kill_when_settled:
                await _kill_when_settled(server, seen, kill_when_settled, messages)
            else:
                await _kill_repeatedly(server, seen, kills, rng)
            stop.set()
            await publisher
            if create_resources:
                await admin_task
            deadline = time.monotonic() + drain_timeout
            while seen.settled() < len(seen.published) and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)  # polling the clients' observations
            await asyncio.sleep(1.0)  # late redeliveries, if any, show up here
            for task in subscribers:
                task.cancel()
        async with AdminClient(server.address) as admin:
            seen.existing |= {t.name for t in await admin.list_topics(PROJECT).collect()}
            seen.existing |= {s.name for s in await admin.list_subscriptions(PROJECT).collect()}
            seen.existing |= {s.name for s in await admin.list_snapshots(PROJECT).collect()}
    finally:
        await server.stop()
    return seen
