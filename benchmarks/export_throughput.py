"""Export benchmark: a Cloud Storage subscription writing text files to bucket directories,
against the same server's plain Pull + Acknowledge (the in-run peer).

Usage::

    .venv/bin/python benchmarks/export_throughput.py [--messages 200000]
        [--max-messages 10000] [--repeat 1] [--write]

One ``eoclient serve --buckets-dir TMP`` process. For the export: a topic and a Cloud
Storage subscription (text, ``--max-messages`` a file) whose bucket does not exist yet, so
the messages (100 bytes each) wait in it while they are published; then the bucket is made,
a GetSubscription makes the server look at it at once, and the clock runs until every
message is a line of a file. For the peer: a plain subscription drained by one client
Pulling 1,000 at a time and Acknowledging each response (``server_pull_ack.drain``).
Reported: messages a second, the server process's CPU time a message (user + system, from
/proc), and its peak resident memory (VmHWM) after publishing and after the export: what
the export added is its batches (streamed to local files, not held) and its leases.
Goal: 50,000 messages a second of server CPU (<= 20 µs a message).

Not a test: nothing here asserts a speed. ``--write`` appends the table to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _docs import append_run
from _server import PAYLOAD, fill_subscription, process_cpu, start_server
from server_pull_ack import Result, drain

STALL_SECONDS = 60.0


@dataclass
class Memory:
    before: int  # kB, VmHWM after publishing
    after: int  # kB, VmHWM after the export


def peak_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def _lines(bucket: Path) -> int:
    """Messages written so far: each is a line of 101 bytes (the payload and its newline),
    so the files' sizes tell without reading them."""
    return sum(p.stat().st_size for p in bucket.rglob("*") if p.is_file()) // (len(PAYLOAD) + 1)


async def export(
    address: str, pid: int, buckets: Path, count: int, max_messages: int
) -> tuple[Result, Memory]:
    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    stamp = f"{time.time_ns():x}"
    bucket = f"bench-{stamp}"
    topic = f"projects/bench-project/topics/export-{stamp}"
    subscription = f"projects/bench-project/subscriptions/export-{stamp}"
    config = pubsub_pb2.CloudStorageConfig(bucket=bucket, max_messages=max_messages)
    await fill_subscription(address, topic, subscription, count, cloud_storage_config=config)
    memory_before = peak_rss_kb(pid)
    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        cpu_before = process_cpu(pid)
        started = last_progress = time.perf_counter()
        (buckets / bucket).mkdir()
        await transport.call(
            "Subscriber",
            "GetSubscription",
            pubsub_pb2.GetSubscriptionRequest(subscription=subscription),
            pubsub_pb2.Subscription,
        )
        written = 0
        while written < count:
            await asyncio.sleep(0.05)
            now_written = await asyncio.to_thread(_lines, buckets / bucket)
            now = time.perf_counter()
            if now_written > written:
                written, last_progress = now_written, now
            elif now - last_progress > STALL_SECONDS:
                break
        seconds = last_progress - started
        server_cpu = process_cpu(pid) - cpu_before
    finally:
        await transport.close()
    result = Result(
        "eoclient serve",
        "text export",
        count,
        written,
        max(written - count, 0),
        seconds,
        server_cpu,
    )
    return result, Memory(memory_before, peak_rss_kb(pid))


def table(rows: list[tuple[Result, Memory | None]]) -> list[str]:
    lines = [
        "| run | messages | written / received | msg/s | server CPU µs/msg "
        "| peak RSS after publishing → after (MiB) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for result, memory in rows:
        rss = f"{memory.before / 1024:.0f} → {memory.after / 1024:.0f}" if memory else ""
        lines.append(
            f"| {result.kind} | {result.messages} | {result.received} | {result.rate:,.0f} | "
            f"{result.cpu_per_message:.1f} | {rss} |"
        )
    exports = [r for r, _ in rows if r.kind == "text export" and r.received]
    peers = [r for r, _ in rows if r.kind == "plain" and r.received]
    if exports and peers:
        best_export = min(r.cpu_per_message for r in exports)
        best_peer = min(r.cpu_per_message for r in peers)
        lines.append("")
        lines.append(
            f"Best of each: text export {best_export:.1f} µs of server CPU a message "
            f"({1e6 / best_export:,.0f} msg/s of server CPU; goal 50,000), plain Pull + "
            f"Acknowledge {best_peer:.1f}: export / pull **{best_export / best_peer:.2f}x**."
        )
    return lines


async def run(options: argparse.Namespace) -> list[tuple[Result, Memory | None]]:
    rows: list[tuple[Result, Memory | None]] = []
    with tempfile.TemporaryDirectory(prefix="export-bench-") as tmp:
        buckets = Path(tmp)
        server, address = start_server("--buckets-dir", str(buckets), "--no-rest")
        try:
            for _ in range(options.repeat):
                print("text export", flush=True)
                result, memory = await export(
                    address, server.pid, buckets, options.messages, options.max_messages
                )
                rows.append((result, memory))
                print("plain Pull + Acknowledge", flush=True)
                rows.append(
                    (
                        await drain(
                            address, server.pid, "eoclient serve", "plain", options.messages, 1000
                        ),
                        None,
                    )
                )
        finally:
            server.terminate()
            server.wait(timeout=30)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--max-messages", type=int, default=10_000, help="messages a file")
    parser.add_argument("--repeat", type=int, default=1, help="export and peer, alternated")
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()
    load_before = os.getloadavg()[0]
    rows = asyncio.run(run(options))
    load_after = os.getloadavg()[0]
    lines = table(rows)
    print("\n".join(lines))
    print(f"load average {load_before:.1f} before, {load_after:.1f} after")
    if options.write:
        append_run("Text export", lines, load_before, load_after)
    return 0


if __name__ == "__main__":
    sys.exit(main())
