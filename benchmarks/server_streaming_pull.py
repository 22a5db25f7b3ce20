"""Server benchmark: StreamingPull, the server's CPU a message delivered and acknowledged.

Usage::

    .venv/bin/python benchmarks/server_streaming_pull.py [--messages 100000] [--repeat 3]
        [--baseline-src DIR] [--data-dir] [--write]

What a streaming subscriber asks of a server: for each kind of subscription (plain,
exactly-once), pre-publish the messages (100 bytes each) to a fresh subscription of an
``eoclient serve`` process, then receive them with eoclient's subscriber on one stream,
in batches of up to 1,000, and acknowledge each batch (plain: ``batch.ack()``;
exactly-once: ``batch.ack_with_response()`` awaited, every status checked, which the server
answers with stream confirmations). Reported: the server process's CPU time a message
(from /proc, user + system, its threads included) over the receiving loop, and messages a
second. ``--repeat N`` runs each case N times and reports the least CPU a message (the run
the machine's other load disturbed least).

``--baseline-src DIR`` runs every case a second time against a server started with
``DIR/src`` first on its import path (e.g. ``git archive OLD src | tar -x -C DIR``), the two
alternating run by run, so a change in the machine's load falls on both: a before/after
comparison of the server's StreamingPull path. ``--data-dir`` runs the servers durable
(SQLite in a temporary directory).

Not a test: nothing here asserts a speed. ``--write`` appends the table to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _docs import append_run
from _server import fill_subscription, process_cpu, start_server

KINDS = ("plain", "exactly-once")


@dataclass
class Run:
    server: str  # "this" or "baseline"
    kind: str
    messages: int
    seconds: float
    server_cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    @property
    def cpu_per_message(self) -> float:
        return self.server_cpu / self.messages * 1e6 if self.messages else 0.0


async def receive(address: str, pid: int, server: str, kind: str, count: int) -> Run:
    from eoclient import AcknowledgeStatus, FlowControl, SubscriberClient

    stamp = f"{time.time_ns():x}"
    topic = f"projects/bench-project/topics/streaming-{stamp}"
    subscription = f"projects/bench-project/subscriptions/streaming-{stamp}"
    await fill_subscription(
        address, topic, subscription, count, enable_exactly_once_delivery=kind != "plain"
    )
    received = 0
    failed = 0

    async def settle(batch: Any) -> None:
        nonlocal failed
        statuses = await batch.ack_with_response()
        failed += sum(status is not AcknowledgeStatus.SUCCESS for status in statuses)

    async with SubscriberClient(address) as client:
        cpu_before = process_cpu(pid)
        started = time.perf_counter()
        async with (
            client.subscribe(subscription, flow_control=FlowControl(max_messages=2000)) as stream,
            asyncio.TaskGroup() as settling,
        ):
            async for batch in stream.batches(max_messages=1000):
                received += len(batch)
                if kind == "plain":
                    batch.ack()
                else:
                    settling.create_task(settle(batch))
                if received >= count:
                    break
        seconds = time.perf_counter() - started
        server_cpu = process_cpu(pid) - cpu_before
    if failed:
        raise RuntimeError(f"{failed} acks did not succeed")
    return Run(server, kind, received, seconds, server_cpu)


async def run(options: argparse.Namespace) -> list[Run]:
    variants: list[tuple[str, Path | None]] = [("this", None)]
    if options.baseline_src:
        variants.append(("baseline", Path(options.baseline_src) / "src"))
    runs: list[Run] = []
    for _ in range(options.repeat):
        for kind in KINDS:
            for name, src in variants:
                with tempfile.TemporaryDirectory(prefix="bench-streaming-") as scratch:
                    server, address = start_server(
                        *(["--data-dir", scratch] if options.data_dir else []), src=src
                    )
                    try:
                        result = await receive(address, server.pid, name, kind, options.messages)
                    finally:
                        server.terminate()
                        server.wait(timeout=30)
                print(
                    f"{name:8} {kind:12} {result.cpu_per_message:6.1f} µs/msg "
                    f"{result.rate:10,.0f} msg/s",
                    flush=True,
                )
                runs.append(result)
    return runs


def table(runs: list[Run]) -> list[str]:
    lines = [
        "| server | subscription | messages | msg/s | server CPU µs/msg (least of the runs) |",
        "|---|---|---:|---:|---:|",
    ]
    best: dict[tuple[str, str], Run] = {}
    for r in runs:
        key = (r.server, r.kind)
        if key not in best or r.cpu_per_message < best[key].cpu_per_message:
            best[key] = r
    for (server, kind), r in best.items():
        lines.append(
            f"| {server} | {kind} | {r.messages} | {r.rate:,.0f} | {r.cpu_per_message:.2f} |"
        )
    for kind in KINDS:
        this, baseline = best.get(("this", kind)), best.get(("baseline", kind))
        if this and baseline and baseline.cpu_per_message:
            lines.append("")
            lines.append(
                f"{kind}: this / baseline server CPU a message "
                f"**{this.cpu_per_message / baseline.cpu_per_message:.3f}**"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline-src", help="a checkout (DIR/src) to compare against")
    parser.add_argument("--data-dir", action="store_true", help="durable servers (SQLite)")
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()
    load_before = os.getloadavg()[0]
    runs = asyncio.run(run(options))
    load_after = os.getloadavg()[0]
    lines = table(runs)
    print("\n".join(lines))
    print(f"load average {load_before:.1f} before, {load_after:.1f} after")
    if options.write:
        store = "durable (SQLite)" if options.data_dir else "in memory"
        append_run(f"StreamingPull server CPU, {store}", lines, load_before, load_after)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
