"""Server benchmark: unary Pull + Acknowledge, eoclient serve against Google's emulator.

Usage::

    .venv/bin/python benchmarks/server_pull_ack.py [--messages 200000]
        [--emulator-messages 200000] [--pull-size 1000] [--durable] [--repeat 1]
        [--write]

What a batch consumer (the Spark source's read tasks, a cron job draining a backlog) asks
of a server: for each server (each in its own process) and each kind of subscription
(plain, exactly-once), pre-publish the messages (100 bytes each) and then, from one client
on one connection, Pull ``--pull-size`` at a time and Acknowledge each response's ack ids
until every published id has been received. Reported: messages a second over that loop,
the server process's CPU time a message (from /proc, the emulator's JVM included whole),
and duplicates (ids received more than once). Both servers run in the same session, so
the ratio is a fair one for this machine's load; the emulator answers at most 100
messages a Pull (docs/protocol.md#where-the-emulator-differs), which is part of what is measured.

``--durable`` also runs ``eoclient serve --data-dir`` (SQLite, in a temporary directory)
and reports its msg/s as a ratio of the memory server's. ``--repeat N`` runs our servers N
times over (the emulator once) and gives each ratio as the median of the rounds' ratios,
each round's listed: this VM's speed moves by up to 2x within minutes, and a ratio of one
memory run and one durable run a few seconds apart moved 0.40–1.00 for the same code.

Not a test: nothing here asserts a speed. ``--write`` appends the table to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from dataclasses import dataclass

from _docs import append_run
from _server import DURABLE, fill_subscription, process_cpu, run_servers

# A loop that stops making progress for this long is reported incomplete, not waited on.
STALL_SECONDS = 30.0


@dataclass
class Result:
    server: str
    kind: str
    messages: int
    received: int
    duplicates: int
    seconds: float
    server_cpu: float

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds else 0.0

    @property
    def cpu_per_message(self) -> float:
        return self.server_cpu / self.received * 1e6 if self.received else 0.0


async def drain(
    address: str, pid: int, server: str, kind: str, count: int, pull_size: int
) -> Result:
    from google.protobuf import empty_pb2

    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    stamp = f"{time.time_ns():x}"
    topic = f"projects/bench-project/topics/pull-ack-{kind}-{stamp}"
    subscription = f"projects/bench-project/subscriptions/pull-ack-{kind}-{stamp}"
    published = set(
        await fill_subscription(
            address,
            topic,
            subscription,
            count,
            enable_exactly_once_delivery=kind == "exactly-once",
        )
    )
    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    seen: set[str] = set()
    duplicates = 0
    try:
        cpu_before = process_cpu(pid)
        started = last_progress = time.perf_counter()
        while len(seen) < len(published):
            response = await transport.call(
                "Subscriber",
                "Pull",
                pubsub_pb2.PullRequest(subscription=subscription, max_messages=pull_size),
                pubsub_pb2.PullResponse,
            )
            received = response.received_messages
            now = time.perf_counter()
            if not received:
                if now - last_progress > STALL_SECONDS:
                    break
                continue
            last_progress = now
            for message in received:
                if message.message.message_id in seen:
                    duplicates += 1
                seen.add(message.message.message_id)
            await transport.call(
                "Subscriber",
                "Acknowledge",
                pubsub_pb2.AcknowledgeRequest(
                    subscription=subscription, ack_ids=[m.ack_id for m in received]
                ),
                empty_pb2.Empty,
            )
        seconds = last_progress - started
        server_cpu = process_cpu(pid) - cpu_before
    finally:
        await transport.close()
    return Result(server, kind, count, len(seen & published), duplicates, seconds, server_cpu)


def table(results: list[Result]) -> list[str]:
    lines = [
        "| server | subscription | messages | received | duplicates | msg/s | server CPU µs/msg |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.server} | {r.kind} | {r.messages} | {r.received} | {r.duplicates} | "
            f"{r.rate:,.0f} | {r.cpu_per_message:.1f} |"
        )
    for kind in ("plain", "exactly-once"):
        memory = [r for r in results if r.server == "eoclient serve" and r.kind == kind]
        durable = [r for r in results if r.server == DURABLE and r.kind == kind]
        # Round by round: the i-th durable run against the i-th memory run.
        ratios = [d.rate / m.rate for m, d in zip(memory, durable, strict=False) if m.rate]
        if ratios:
            rounds = (
                f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
            )
            lines.append("")
            lines.append(
                f"Ratio durable / memory, {kind}: **{statistics.median(ratios):.2f}** msg/s"
                f"{rounds}."
            )
    # Against the emulator: our first round's runs, those of the emulator's minutes.
    by_kind: dict[tuple[str, str], Result] = {}
    for r in results:
        by_kind.setdefault((r.server, r.kind), r)
    for kind in ("plain", "exactly-once"):
        ours, theirs = by_kind.get(("eoclient serve", kind)), by_kind.get(("emulator", kind))
        if ours and theirs and ours.received and theirs.received and theirs.seconds:
            lines.append("")
            lines.append(
                f"Ratio eoclient serve / emulator, {kind}: **{ours.rate / theirs.rate:.1f}x** "
                f"msg/s, {theirs.cpu_per_message / ours.cpu_per_message:.1f}x less server CPU "
                "a message."
            )
    return lines


async def run(options: argparse.Namespace) -> list[Result]:
    async def measure(address: str, pid: int, label: str, kind: str, messages: int) -> Result:
        return await drain(address, pid, label, kind, messages, options.pull_size)

    results: list[Result] = []
    for round_ in range(options.repeat):
        emulator_messages = options.emulator_messages if round_ == 0 else 0
        results += await run_servers(
            measure, options.messages, emulator_messages, durable=options.durable
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--emulator-messages",
        type=int,
        default=200_000,
        help="messages for the emulator's runs (0: skip it)",
    )
    parser.add_argument("--pull-size", type=int, default=1000, help="max_messages a Pull")
    parser.add_argument(
        "--durable", action="store_true", help="also eoclient serve --data-dir (SQLite)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of our servers (ratios: the median)"
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
        append_run("Pull + Acknowledge", lines, load_before, load_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
