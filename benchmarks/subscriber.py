"""Subscriber benchmark: eoclient vs google-cloud-pubsub against one reference server.

    .venv/bin/python benchmarks/subscriber.py [--messages 200000] [--official-eod-messages N]

Starts ``eoclient serve`` in its own process, and for each scenario pre-publishes
the messages (100 bytes each) to a fresh subscription, then runs the consumer in a
process of its own and reads back what it measured:

* plain: the handler acks without waiting (``message.ack()``);
* eod: exactly-once subscription, every ack's result awaited (eoclient:
  ``await message.ack_with_response()``; official: ``ack_with_response().result()``
  inside the callback).

Reported per run: messages per second (from subscribe to the last result, closing
included), client CPU microseconds per message (user + system of the consumer
process), and the consumer's peak RSS. Results are appended to docs/benchmarks.md
only with ``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

# benchmarks/ is on sys.path when run as a script
from _server import fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent


def _usage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


# ---------------------------------------------------------------- consumers


async def _consume_eoclient(address: str, subscription: str, count: int, eod: bool) -> float:
    from eoclient import FlowControl, SubscriberClient

    done = asyncio.Event()
    settled = 0

    async def handle(message: object) -> None:
        nonlocal settled
        await message.ack_with_response()  # type: ignore[attr-defined]
        settled += 1
        if settled >= count:
            done.set()

    started = time.perf_counter()
    async with (
        SubscriberClient(address) as client,
        client.subscribe(subscription, flow_control=FlowControl(max_messages=1000)) as stream,
    ):
        if eod:
            tasks: set[asyncio.Task[None]] = set()
            received = 0
            async for message in stream:
                task = asyncio.create_task(handle(message))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                received += 1
                if received >= count:
                    break
            await done.wait()
        else:
            received = 0
            async for message in stream:
                message.ack()
                received += 1
                if received >= count:
                    break
    return time.perf_counter() - started


def _consume_official(address: str, subscription: str, count: int, eod: bool) -> float:
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    lock = threading.Lock()
    settled = 0
    finished = threading.Event()

    def callback(message: object) -> None:
        nonlocal settled
        if eod:
            message.ack_with_response().result()  # type: ignore[attr-defined]
        else:
            message.ack()  # type: ignore[attr-defined]
        with lock:
            settled += 1
            if settled >= count:
                finished.set()

    subscriber = pubsub_v1.SubscriberClient()
    started = time.perf_counter()
    future = subscriber.subscribe(
        subscription, callback, flow_control=pubsub_v1.types.FlowControl(max_messages=1000)
    )
    finished.wait()
    future.cancel()
    future.result()
    subscriber.close()
    return time.perf_counter() - started


def consume_main(options: argparse.Namespace) -> None:
    before = _usage()
    if options.client == "eoclient":
        elapsed = asyncio.run(
            _consume_eoclient(options.address, options.subscription, options.count, options.eod)
        )
    else:
        elapsed = _consume_official(
            options.address, options.subscription, options.count, options.eod
        )
    after = _usage()
    print(
        json.dumps(
            {
                "seconds": elapsed,
                "cpu_seconds": after["cpu"] - before["cpu"],
                "peak_rss_mib": after["rss_mib"],
            }
        ),
        flush=True,
    )


# ---------------------------------------------------------------- orchestration


def run_scenario(address: str, client: str, eod: bool, count: int, index: int) -> dict[str, float]:
    mode = "eod" if eod else "plain"
    topic = f"projects/bench/topics/t-{index}-{client}-{mode}"
    subscription = f"projects/bench/subscriptions/s-{index}-{client}-{mode}"
    asyncio.run(
        fill_subscription(address, topic, subscription, count, enable_exactly_once_delivery=eod)
    )
    command = [
        sys.executable,
        __file__,
        "consume",
        "--client",
        client,
        "--address",
        address,
        "--subscription",
        subscription,
        "--count",
        str(count),
    ] + (["--eod"] if eod else [])
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
    result: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    result["messages"] = count
    result["msg_per_s"] = count / result["seconds"]
    result["cpu_us_per_msg"] = result["cpu_seconds"] / count * 1e6
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    consume = sub.add_parser("consume")
    consume.add_argument("--client", choices=["eoclient", "official"], required=True)
    consume.add_argument("--address", required=True)
    consume.add_argument("--subscription", required=True)
    consume.add_argument("--count", type=int, required=True)
    consume.add_argument("--eod", action="store_true")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--official-eod-messages",
        type=int,
        default=0,
        help="fewer messages for the official client's awaited-EOD run (it manages ~800 msg/s)",
    )
    parser.add_argument(
        "--write", action="store_true", help="append the table to docs/benchmarks.md"
    )
    options = parser.parse_args()
    if options.command == "consume":
        consume_main(options)
        return 0

    server, address = start_server()
    try:
        rows = []
        for index, (client, eod) in enumerate(
            [("eoclient", False), ("official", False), ("eoclient", True), ("official", True)]
        ):
            count = options.messages
            if client == "official" and eod and options.official_eod_messages:
                count = options.official_eod_messages
            result = run_scenario(address, client, eod, count, index)
            rows.append((client, "exactly-once, awaited" if eod else "plain ack", result))
            print(
                f"{client:9} {'eod' if eod else 'plain':5} {result['messages']:>7} msgs "
                f"{result['msg_per_s']:>10,.0f} msg/s {result['cpu_us_per_msg']:>7.1f} µs/msg "
                f"{result['peak_rss_mib']:>7.1f} MiB",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
    if options.write:
        lines = [
            "",
            f"### Subscriber, {time.strftime('%Y-%m-%d')} (`{' '.join(sys.argv)}`)",
            "",
            "| client | mode | messages | msg/s | client CPU µs/msg | peak RSS MiB |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for client, mode, r in rows:
            lines.append(
                f"| {client} | {mode} | {r['messages']:.0f} | {r['msg_per_s']:,.0f} | "
                f"{r['cpu_us_per_msg']:.1f} | {r['peak_rss_mib']:.0f} |"
            )
        with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
