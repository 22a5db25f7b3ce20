"""Subscriber benchmark: eoclient vs google-cloud-pubsub, side by side in one run.

    .venv/bin/python benchmarks/subscriber.py [--messages 200000] [--official-eod-messages N]
        [--emulator-messages 3000] [--profile] [--write]

Starts ``eoclient serve`` in its own process (and, with ``--emulator-messages``, Google's
Pub/Sub emulator), and for each scenario pre-publishes the messages (100 bytes each) to a
fresh subscription, then runs the consumer in a process of its own and reads back what it
measured:

* plain: the handler acks without waiting (``message.ack()``);
* eod: exactly-once subscription, every ack's result awaited (eoclient: a task per
  message awaiting ``message.ack_with_response()``; official:
  ``ack_with_response().result()`` inside the callback, or, as ``official-callback``,
  ``ack_with_response().add_done_callback(...)``, which does not hold a callback thread).

On the emulator only the exactly-once scenarios run: it answers exactly-once acks only
through unary calls (no stream confirmations), the path the real service takes too.

Reported per run: messages per second (from subscribe to the last result, closing
included), client CPU microseconds per message (user + system of the consumer process),
and the consumer's peak RSS. ``--profile`` also runs the eoclient exactly-once consumer
under cProfile and prints its CPU by part (module). Results are appended to
docs/benchmarks.md only with ``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import resource
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import GoogleEmulator, fill_subscription, start_server

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


def _consume_official(
    address: str, subscription: str, count: int, eod: bool, callbacks: bool = False
) -> float:
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    lock = threading.Lock()
    settled = 0
    finished = threading.Event()

    def one_settled(*_: object) -> None:
        nonlocal settled
        with lock:
            settled += 1
            if settled >= count:
                finished.set()

    def callback(message: object) -> None:
        if eod and callbacks:
            message.ack_with_response().add_done_callback(one_settled)  # type: ignore[attr-defined]
            return
        if eod:
            message.ack_with_response().result()  # type: ignore[attr-defined]
        else:
            message.ack()  # type: ignore[attr-defined]
        one_settled()

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
    profile: dict[str, float] = {}
    if options.client == "eoclient":
        coroutine = _consume_eoclient(
            options.address, options.subscription, options.count, options.eod
        )
        if options.profile:
            profiler = cProfile.Profile()
            elapsed = profiler.runcall(asyncio.run, coroutine)
            profile = _by_part(profiler, options.count)
        else:
            elapsed = asyncio.run(coroutine)
    else:
        elapsed = _consume_official(
            options.address,
            options.subscription,
            options.count,
            options.eod,
            callbacks=options.client == "official-callback",
        )
    after = _usage()
    print(
        json.dumps(
            {
                "seconds": elapsed,
                "cpu_seconds": after["cpu"] - before["cpu"],
                "peak_rss_mib": after["rss_mib"],
                "profile": profile,
            }
        ),
        flush=True,
    )


def _by_part(profiler: cProfile.Profile, count: int) -> dict[str, float]:
    """Own time (µs per message) by part: eoclient module, or the library it is spent in."""
    parts: dict[str, float] = defaultdict(float)
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    for (filename, _, function), (_, _, own, _, _) in stats.items():
        if "/eoclient/" in filename:
            part = "eoclient." + filename.split("/eoclient/", 1)[1].removesuffix(".py").replace(
                "/", "."
            )
        elif "/grpc/" in filename or "cygrpc" in filename:
            part = "grpc"
        elif "/asyncio/" in filename or (function.startswith("<method") and "loop" in function):
            part = "asyncio"
        elif "benchmarks/subscriber" in filename:
            part = "benchmark (task per message)"
        elif filename == "~":
            part = "builtins: " + function.split(" of ")[0].strip("<>").removeprefix("method ")
            part = part if len(part) < 60 else "builtins"
        else:
            part = "other"
        parts[part] += own / count * 1e6
    return dict(sorted(parts.items(), key=lambda item: -item[1])[:16])


# ---------------------------------------------------------------- orchestration


def run_scenario(
    address: str, client: str, eod: bool, count: int, index: int, *, profile: bool = False
) -> dict[str, Any]:
    mode = "eod" if eod else "plain"
    run = f"{index}-{client}-{mode}-{os.getpid()}"
    topic = f"projects/bench/topics/t-{run}"
    subscription = f"projects/bench/subscriptions/s-{run}"
    asyncio.run(
        fill_subscription(address, topic, subscription, count, enable_exactly_once_delivery=eod)
    )
    command = (
        [
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
        ]
        + (["--eod"] if eod else [])
        + (["--profile"] if profile else [])
    )
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
    result: dict[str, Any] = json.loads(output.stdout.strip().splitlines()[-1])
    result["messages"] = count
    result["msg_per_s"] = count / result["seconds"]
    result["cpu_us_per_msg"] = result["cpu_seconds"] / count * 1e6
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    consume = sub.add_parser("consume")
    consume.add_argument(
        "--client", choices=["eoclient", "official", "official-callback"], required=True
    )
    consume.add_argument("--address", required=True)
    consume.add_argument("--subscription", required=True)
    consume.add_argument("--count", type=int, required=True)
    consume.add_argument("--eod", action="store_true")
    consume.add_argument("--profile", action="store_true")
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--official-eod-messages",
        type=int,
        default=0,
        help="fewer messages for the official client's awaited-EOD run (it manages ~800 msg/s)",
    )
    parser.add_argument(
        "--emulator-messages",
        type=int,
        default=0,
        help="also run the exactly-once scenarios on Google's emulator with this many messages",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile eoclient's exactly-once consumer"
    )
    parser.add_argument(
        "--write", action="store_true", help="append the table to docs/benchmarks.md"
    )
    options = parser.parse_args()
    if options.command == "consume":
        consume_main(options)
        return 0

    load_before = os.getloadavg()
    rows: list[tuple[str, str, str, dict[str, Any]]] = []
    server, address = start_server()
    try:
        scenarios = [
            ("eoclient", False),
            ("official", False),
            ("eoclient", True),
            ("official", True),
        ]
        for index, (client, eod) in enumerate(scenarios):
            count = options.messages
            if client == "official" and eod and options.official_eod_messages:
                count = options.official_eod_messages
            result = run_scenario(address, client, eod, count, index)
            rows.append(_report("reference server", client, eod, result))
        if options.profile:
            result = run_scenario(address, "eoclient", True, options.messages, 9, profile=True)
            print("eoclient exactly-once, own CPU by part (µs/msg, under cProfile):")
            for part, micros in result["profile"].items():
                print(f"  {micros:7.2f}  {part}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    if options.emulator_messages:
        with GoogleEmulator() as emulator:
            for index, client in enumerate(["eoclient", "official", "official-callback"]):
                result = run_scenario(emulator, client, True, options.emulator_messages, 20 + index)
                rows.append(_report("Google's emulator", client, True, result))
    load = f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    print(load)
    if options.write:
        _write(rows, load)
    return 0


def _report(
    server: str, client: str, eod: bool, result: dict[str, Any]
) -> tuple[str, str, str, dict[str, Any]]:
    mode = "exactly-once, awaited" if eod else "plain ack"
    if client == "official-callback":
        mode = "exactly-once, callback on each result"
    print(
        f"{server:17} {client:17} {'eod' if eod else 'plain':5} {result['messages']:>7} msgs "
        f"{result['msg_per_s']:>10,.0f} msg/s {result['cpu_us_per_msg']:>7.1f} µs/msg "
        f"{result['peak_rss_mib']:>7.1f} MiB",
        flush=True,
    )
    return server, client, mode, result


def _write(rows: list[tuple[str, str, str, dict[str, Any]]], load: str) -> None:
    lines = [
        "",
        f"### Subscriber, {time.strftime('%Y-%m-%d %H:%M')} (`{' '.join(sys.argv)}`, {load})",
        "",
        "| server | client | mode | messages | msg/s | client CPU µs/msg | peak RSS MiB |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for server, client, mode, r in rows:
        lines.append(
            f"| {server} | {client} | {mode} | {r['messages']:.0f} | {r['msg_per_s']:,.0f} | "
            f"{r['cpu_us_per_msg']:.1f} | {r['peak_rss_mib']:.0f} |"
        )
    with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
