"""The servers the benchmarks measure against, each in a process of its own (the reference
server, Google's emulator), and the messages they pre-publish to them."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar


def start_server(*extra_args: str, src: Path | None = None) -> tuple[subprocess.Popen[str], str]:
    """Start ``eoclient serve`` on a free port (``extra_args``: more of its flags, e.g.
    ``--data-dir DIR``; ``src``: import eoclient from there, to measure another commit's
    server); return the process and its host:port."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
    server = subprocess.Popen(
        [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0", *extra_args],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("export PUBSUB_EMULATOR_HOST="):
            return server, line.strip().split("=", 1)[1]
    server.wait(timeout=10)
    raise RuntimeError("eoclient serve exited before printing its address")


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far, its threads included (Linux
    /proc: utime and stime, fields 14 and 15 of its stat line)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# Messages the benchmarks pre-publish: 100-byte payloads, 1,000 per Publish call.
PAYLOAD = b"x" * 100
PUBLISH_BATCH = 1000


async def fill_subscription(
    address: str,
    topic: str,
    subscription: str,
    count: int,
    attributes: Callable[[int], dict[str, str]] | None = None,
    **subscription_fields: Any,
) -> list[str]:
    """Create ``topic`` and ``subscription`` on it (``subscription_fields``: more Subscription
    fields), publish ``count`` messages (``attributes(i)`` for the i-th) and return their ids.

    Raw transport calls, not a client: the set-up stays out of what the clients measure. The
    protobuf modules are imported here, not at module level: a consumer process of the
    official client must not load eoclient's copy of the same descriptors.
    """
    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        await transport.call(
            "Publisher", "CreateTopic", pubsub_pb2.Topic(name=topic), pubsub_pb2.Topic
        )
        await transport.call(
            "Subscriber",
            "CreateSubscription",
            pubsub_pb2.Subscription(name=subscription, topic=topic, **subscription_fields),
            pubsub_pb2.Subscription,
        )
        ids: list[str] = []
        for start in range(0, count, PUBLISH_BATCH):
            batch = [
                pubsub_pb2.PubsubMessage(
                    data=PAYLOAD, attributes=attributes(i) if attributes is not None else {}
                )
                for i in range(start, min(count, start + PUBLISH_BATCH))
            ]
            ids += await transport.publish(topic, batch)
        return ids
    finally:
        await transport.close()


# The emulator jar, found as tests/conftest.py finds it
# (docs/protocol.md#where-the-emulator-differs).
EMULATOR_PACKAGE = "google-cloud-cli-pubsub-emulator"
EMULATOR_JAR = (
    "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib/cloud-pubsub-emulator-0.8.20-all.jar"
)


class GoogleEmulator:
    """Google's emulator on a free 127.0.0.1 port, in its own process group; ``pid`` is
    its JVM's (the process whose CPU time is the emulator's)."""

    pid: int

    def __enter__(self) -> str:
        java = shutil.which("java")
        listing = subprocess.run(
            ["dpkg", "-L", EMULATOR_PACKAGE], capture_output=True, text=True, check=False
        )
        jars = [line for line in listing.stdout.splitlines() if line.endswith("-all.jar")]
        jar = next((j for j in [*jars, EMULATOR_JAR] if Path(j).is_file()), None)
        if java is None or jar is None:
            raise SystemExit("Google's emulator is not installed (java and its jar are needed)")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self._log = tempfile.NamedTemporaryFile(prefix="emulator-", suffix=".log")
        self._process = subprocess.Popen(
            [java, "-jar", jar, "--host=127.0.0.1", f"--port={port}"],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.pid = self._process.pid
        deadline = time.monotonic() + 60
        while b"Server started" not in Path(self._log.name).read_bytes():
            if time.monotonic() > deadline or self._process.poll() is not None:
                self.__exit__()
                raise SystemExit("the emulator did not start")
            time.sleep(0.1)
        return f"127.0.0.1:{port}"

    def __exit__(self, *_: object) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(10)
        self._log.close()


DURABLE = "eoclient serve --data-dir"
SUBSCRIPTION_KINDS = ("plain", "exactly-once")
Measured = TypeVar("Measured")
# One measurement: (address, server pid, server label, subscription kind, messages) -> result.
Measure = Callable[[str, int, str, str, int], Awaitable[Measured]]


async def run_servers(
    measure: Measure[Measured], messages: int, emulator_messages: int, *, durable: bool
) -> list[Measured]:
    """``measure`` on a plain and an exactly-once subscription of ``eoclient serve`` (in
    memory; with ``durable`` also ``--data-dir``, SQLite in a temporary directory), each
    server in a process of its own, then of Google's emulator with ``emulator_messages``
    (0: not run): every server in one session, so that their ratios share the machine's
    load."""
    results = await _run_ours(measure, messages, "eoclient serve")
    if durable:
        with tempfile.TemporaryDirectory() as data_dir:
            results += await _run_ours(measure, messages, DURABLE, "--data-dir", data_dir)
    if emulator_messages:
        emulator = GoogleEmulator()
        with emulator as emulator_address:
            for kind in SUBSCRIPTION_KINDS:
                print(f"emulator, {kind}", flush=True)
                results.append(
                    await measure(
                        emulator_address, emulator.pid, "emulator", kind, emulator_messages
                    )
                )
    return results


async def _run_ours(
    measure: Measure[Measured], messages: int, label: str, *flags: str
) -> list[Measured]:
    results: list[Measured] = []
    server, address = start_server(*flags)
    try:
        for kind in SUBSCRIPTION_KINDS:
            print(f"{label}, {kind}", flush=True)
            results.append(await measure(address, server.pid, label, kind, messages))
    finally:
        server.terminate()
        server.wait(timeout=30)
    return results
