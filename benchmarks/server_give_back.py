"""Server benchmark: giving messages back (nacks) against acknowledging them, eoclient serve
and Google's emulator.

Usage::

    .venv/bin/python benchmarks/server_give_back.py [--messages 100000]
        [--emulator-messages 20000] [--request-size 2500] [--durable] [--write]

What a mass give-back asks of a server: a subscriber shutting down with messages in hand,
the Spark connector giving back what it read ahead, the official client's nacks. For each
server (each in its own process) and each kind of subscription (plain, exactly-once),
pre-publish the messages (100 bytes each, a 60 s ack deadline), Pull them all (1,000 a
Pull), give them all back with ModifyAckDeadline 0 in requests of ``--request-size`` ids
(2,500: the most the service takes in one request), Pull them all again and Acknowledge
them in requests of the same size. Reported: the server process's CPU time a message
(from /proc, the emulator's JVM included whole) of the nack requests and of the
Acknowledge requests, their ratio, and the nacks' msg/s. Both servers run in the same
session, so the ratios are fair ones for this machine's load; the emulator answers at
most 100 messages a Pull (docs/protocol.md#where-the-emulator-differs), which only the
Pull phases (not measured) feel.

``--durable`` also runs ``eoclient serve --data-dir`` (SQLite, in a temporary directory).

Not a test: nothing here asserts a speed. ``--write`` appends the table to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from _docs import append_run
from _server import fill_subscription, process_cpu, run_servers

# A Pull loop that stops making progress for this long is reported incomplete.
STALL_SECONDS = 30.0
PULL_SIZE = 1000


@dataclass
class Result:
    server: str
    kind: str
    messages: int
    received: int  # of the second Pull phase: every message given back came again
    nack_seconds: float
    nack_cpu: float
    ack_cpu: float

    def per_message(self, cpu: float) -> float:
        return cpu / self.messages * 1e6 if self.messages else 0.0

    @property
    def nack_rate(self) -> float:
        return self.messages / self.nack_seconds if self.nack_seconds else 0.0


async def pull_all(transport: Any, subscription: str, ids: set[str]) -> list[str]:
    """Pull until every message of ``ids`` came (or nothing came for ``STALL_SECONDS``):
    the ack ids of their latest deliveries."""
    from eoclient._proto import pubsub_pb2

    ack_ids: dict[str, str] = {}
    last_progress = time.perf_counter()
    while len(ack_ids) < len(ids):
        response = await transport.call(
            "Subscriber",
            "Pull",
            pubsub_pb2.PullRequest(subscription=subscription, max_messages=PULL_SIZE),
            pubsub_pb2.PullResponse,
        )
        now = time.perf_counter()
        if not response.received_messages:
            if now - last_progress > STALL_SECONDS:
                break
            continue
        last_progress = now
        for received in response.received_messages:
            ack_ids[received.message.message_id] = received.ack_id
    return list(ack_ids.values())


async def in_requests(
    transport: Any, subscription: str, ack_ids: list[str], size: int, *, nack: bool
) -> None:
    """ModifyAckDeadline 0 (``nack``) or Acknowledge of ``ack_ids``, ``size`` at a time."""
    from google.protobuf import empty_pb2

    from eoclient._proto import pubsub_pb2

    for start in range(0, len(ack_ids), size):
        part = ack_ids[start : start + size]
        if nack:
            request: Any = pubsub_pb2.ModifyAckDeadlineRequest(
                subscription=subscription, ack_ids=part, ack_deadline_seconds=0
            )
            method = "ModifyAckDeadline"
        else:
            request = pubsub_pb2.AcknowledgeRequest(subscription=subscription, ack_ids=part)
            method = "Acknowledge"
        await transport.call("Subscriber", method, request, empty_pb2.Empty)


async def give_back(
    address: str, pid: int, server: str, kind: str, count: int, request_size: int
) -> Result:
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    stamp = f"{time.time_ns():x}"
    topic = f"projects/bench-project/topics/give-back-{kind}-{stamp}"
    subscription = f"projects/bench-project/subscriptions/give-back-{kind}-{stamp}"
    published = set(
        await fill_subscription(
            address,
            topic,
            subscription,
            count,
            enable_exactly_once_delivery=kind == "exactly-once",
            ack_deadline_seconds=60,
        )
    )
    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        ack_ids = await pull_all(transport, subscription, published)
        cpu_before = process_cpu(pid)
        started = time.perf_counter()
        await in_requests(transport, subscription, ack_ids, request_size, nack=True)
        nack_seconds = time.perf_counter() - started
        nack_cpu = process_cpu(pid) - cpu_before
        ack_ids = await pull_all(transport, subscription, published)
        cpu_before = process_cpu(pid)
        await in_requests(transport, subscription, ack_ids, request_size, nack=False)
        ack_cpu = process_cpu(pid) - cpu_before
    finally:
        await transport.close()
    return Result(server, kind, count, len(ack_ids), nack_seconds, nack_cpu, ack_cpu)


def table(results: list[Result]) -> list[str]:
    lines = [
        "| server | subscription | messages | given back and pulled again | nack msg/s | "
        "nack server CPU µs/msg | ack server CPU µs/msg | nack / ack |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        nack, ack = r.per_message(r.nack_cpu), r.per_message(r.ack_cpu)
        ratio = f"{nack / ack:.1f}" if ack else "-"
        lines.append(
            f"| {r.server} | {r.kind} | {r.messages} | {r.received} | {r.nack_rate:,.0f} | "
            f"{nack:.1f} | {ack:.1f} | {ratio} |"
        )
    by_kind = {(r.server, r.kind): r for r in results}
    for kind in ("plain", "exactly-once"):
        ours, theirs = by_kind.get(("eoclient serve", kind)), by_kind.get(("emulator", kind))
        if ours and theirs and ours.nack_cpu and theirs.nack_cpu:
            lines.append("")
            lines.append(
                f"eoclient serve / emulator, {kind}: "
                f"**{theirs.per_message(theirs.nack_cpu) / ours.per_message(ours.nack_cpu):.1f}x**"
                " less server CPU a nacked message."
            )
    return lines


async def run(options: argparse.Namespace) -> list[Result]:
    async def measure(address: str, pid: int, label: str, kind: str, messages: int) -> Result:
        return await give_back(address, pid, label, kind, messages, options.request_size)

    return await run_servers(
        measure, options.messages, options.emulator_messages, durable=options.durable
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument(
        "--emulator-messages",
        type=int,
        default=20_000,
        help="messages for the emulator's runs (0: skip it)",
    )
    parser.add_argument(
        "--request-size", type=int, default=2500, help="ack ids a ModifyAckDeadline/Acknowledge"
    )
    parser.add_argument(
        "--durable", action="store_true", help="also eoclient serve --data-dir (SQLite)"
    )
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()
    load_before = os.getloadavg()[0]
    results = asyncio.run(run(options))
    load_after = os.getloadavg()[0]
    lines = table(results)
    print("\n".join(lines))
    print(f"load average {load_before:.1f} before, {load_after:.1f} after")
    if options.write:
        append_run("Give-back (nack) against Acknowledge", lines, load_before, load_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
