"""The durable reference server against the in-memory one, side by side in one run.

Two ``eoclient serve`` processes: one in memory, one with ``--data-dir`` (SQLite, WAL,
synchronous=FULL, group commit). On each, the same scenarios, each client in a process
of its own (the subscriber and publisher benchmarks' consumers and publishers):

* publish: N 100-byte messages to a topic with one subscription (so the durable server
  stores every message and its backlog row), eoclient and google-cloud-pubsub;
* subscribe: N pre-published messages consumed with plain acks and with exactly-once
  (every result awaited), eoclient and google-cloud-pubsub (the official client's
  awaited exactly-once is ~800 msg/s: it consumes ``--official-eod-messages``);
* a large backlog (``--backlog``, 1,000,000 by default): the server's RSS once it is
  stored, the latency of 100-message unary Pulls at that backlog (p50/p99, each pull's
  messages acked), and, for the durable server, the time from a SIGKILL'd server's
  restart to its first answered Pull;
* outstanding leases (``--leases``, 1,000,000 by default, the default ``--max-leases``):
  on two fresh servers, that many 100-byte messages on an exactly-once subscription
  (600 s deadline), all leased by unary Pulls of 1,000 and none acked; the server's RSS
  then (the durable server keeps a lease without its body, the memory one holds every
  body).

Usage: ``.venv/bin/python benchmarks/durable_server.py [--messages N] [--backlog N]
[--leases N]``.
Prints a Markdown table per part; ``docs/benchmarks.md`` records the runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import publisher as publisher_bench
import subscriber as subscriber_bench
from _server import PAYLOAD, PUBLISH_BATCH, fill_subscription, start_server


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    found = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else float("nan")


async def _create(address: str, topic: str, subscription: str) -> None:
    from eoclient.admin import AdminClient

    async with AdminClient(address) as admin:
        await admin.create_topic(topic)
        await admin.create_subscription(subscription, topic)


def publish_scenario(address: str, client: str, count: int, index: int) -> dict[str, float]:
    topic = f"projects/bench/topics/durable-pub-{index}-{client}"
    asyncio.run(_create(address, topic, topic.replace("/topics/", "/subscriptions/")))
    command = [sys.executable, publisher_bench.__file__, "publish", "--client", client]
    command += ["--address", address, "--topic", topic, "--count", str(count)]
    output = subprocess.run(command, check=True, capture_output=True, text=True, timeout=1800)
    result: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    result["msg_per_s"] = count / result["seconds"]
    return result


async def _backlog_scenario(address: str, count: int) -> dict[str, float]:
    """Fill a subscription with ``count`` messages; pull latency at that backlog."""
    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    topic = "projects/bench/topics/backlog"
    subscription = "projects/bench/subscriptions/backlog"
    started = time.monotonic()
    await fill_subscription(address, topic, subscription, 0)
    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        batch = [pubsub_pb2.PubsubMessage(data=PAYLOAD) for _ in range(PUBLISH_BATCH)]
        for _ in range(count // PUBLISH_BATCH):
            await transport.publish(topic, batch)
        fill_seconds = time.monotonic() - started
        latencies = []
        for _ in range(300):
            begin = time.perf_counter()
            response = await transport.pull(subscription, 100)
            latencies.append(time.perf_counter() - begin)
            await transport.acknowledge(
                subscription, [m.ack_id for m in response.received_messages]
            )
    finally:
        await transport.close()
    latencies.sort()
    return {
        "fill_msg_per_s": count / fill_seconds,
        "pull_p50_ms": statistics.median(latencies) * 1e3,
        "pull_p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1e3,
    }


async def _first_pull_seconds(address: str, started: float) -> float:
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        while True:
            try:
                response = await transport.pull("projects/bench/subscriptions/backlog", 100)
                if response.received_messages:
                    return time.monotonic() - started
            except Exception:  # not serving yet
                await asyncio.sleep(0.01)
    finally:
        await transport.close()


async def _leases_scenario(address: str, count: int) -> dict[str, float]:
    """Lease ``count`` messages without acking any; how long it took."""
    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    topic = "projects/bench/topics/leases"
    subscription = "projects/bench/subscriptions/leases"
    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        await transport.call(
            "Publisher", "CreateTopic", pubsub_pb2.Topic(name=topic), pubsub_pb2.Topic
        )
        await transport.call(
            "Subscriber",
            "CreateSubscription",
            pubsub_pb2.Subscription(
                name=subscription,
                topic=topic,
                ack_deadline_seconds=600,
                enable_exactly_once_delivery=True,
            ),
            pubsub_pb2.Subscription,
        )
        batch = [pubsub_pb2.PubsubMessage(data=PAYLOAD) for _ in range(PUBLISH_BATCH)]
        for _ in range(count // PUBLISH_BATCH):
            await transport.publish(topic, batch)
        started = time.monotonic()
        leased = 0
        while leased < count:
            response = await transport.pull(subscription, 1000)
            if not response.received_messages:
                raise RuntimeError(f"leasing stopped at {leased:,} of {count:,} messages")
            leased += len(response.received_messages)
        return {"leased": leased, "lease_seconds": time.monotonic() - started}
    finally:
        await transport.close()


def leases_part(count: int) -> list[dict[str, Any]]:
    """Two fresh servers, ``count`` outstanding leases each; their RSS."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="eoclient-leases-bench-") as data_dir:
        for mode, args in (("memory", ()), ("durable", ("--data-dir", data_dir))):
            process, address = start_server("--no-rest", *args)
            try:
                result = asyncio.run(_leases_scenario(address, count))
                result["rss_mib"] = _rss_mib(process.pid)
                result["peak_rss_mib"] = _rss_mib(process.pid, "VmHWM")
                rows.append({"server": mode, **result})
                print(rows[-1], flush=True)
            finally:
                process.terminate()
                process.wait(60)
    return rows


def restart_scenario(server: subprocess.Popen[str], data_dir: str) -> dict[str, float]:
    """SIGKILL the durable server and time its restart to the first answered Pull."""
    server.send_signal(signal.SIGKILL)
    server.wait()
    started = time.monotonic()
    restarted, address = start_server("--no-rest", "--data-dir", data_dir)
    try:
        seconds = asyncio.run(_first_pull_seconds(address, started))
        return {
            "restart_to_first_pull_s": seconds,
            "rss_after_restart_mib": _rss_mib(restarted.pid),
        }
    finally:
        restarted.terminate()
        restarted.wait(30)


def _table(rows: list[dict[str, Any]], columns: list[tuple[str, str, str]]) -> str:
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |"]
    lines.append("|" + "|".join("---" if i < 2 else "---:" for i in range(len(columns))) + "|")
    for row in rows:
        lines.append("| " + " | ".join(format(row[k], f) for k, _, f in columns) + " |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--official-eod-messages", type=int, default=5_000)
    parser.add_argument(
        "--backlog", type=int, default=1_000_000, help="0: skip the backlog and restart part"
    )
    parser.add_argument(
        "--leases", type=int, default=1_000_000, help="0: skip the outstanding-leases part"
    )
    parser.add_argument("--clients", default="eoclient,official", help="comma-separated")
    parser.add_argument(
        "--scenarios", default="publish,plain,eod", help="comma-separated: publish, plain, eod"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="rounds of the throughput scenarios (alternating)"
    )
    options = parser.parse_args()
    clients = options.clients.split(",")
    scenarios = options.scenarios.split(",")
    print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="eoclient-durable-bench-") as data_dir:
        servers = {
            "memory": start_server("--no-rest"),
            "durable": start_server("--no-rest", "--data-dir", data_dir),
        }
        throughput: list[dict[str, Any]] = []
        backlog: list[dict[str, Any]] = []
        try:
            index = 0
            for round_ in range(1, options.repeat + 1):
                for client in clients:
                    for kind in scenarios:
                        for mode, (_, address) in servers.items():
                            index += 1
                            if kind == "publish":
                                result = publish_scenario(address, client, options.messages, index)
                                result["messages"] = options.messages
                                scenario = "publish"
                            else:
                                eod = kind == "eod"
                                count = (
                                    options.official_eod_messages
                                    if eod and client == "official"
                                    else options.messages
                                )
                                scenario_of = subscriber_bench.Scenario(
                                    client, "eod" if eod else "plain"
                                )
                                result = subscriber_bench.run_scenario(
                                    address, scenario_of, count, index
                                )
                                scenario = (
                                    "subscribe, exactly-once awaited" if eod else "subscribe, plain"
                                )
                            throughput.append(
                                {"server": mode, "client": client, "scenario": scenario,
                                 "round": round_, **result}
                            )  # fmt: skip
                            print(throughput[-1], flush=True)
            restart: dict[str, float] = {}
            for mode, (process, address) in servers.items():
                if not options.backlog:
                    break
                result = asyncio.run(_backlog_scenario(address, options.backlog))
                result["rss_mib"] = _rss_mib(process.pid)
                result["peak_rss_mib"] = _rss_mib(process.pid, "VmHWM")
                backlog.append({"server": mode, "messages": options.backlog, **result})
                print(backlog[-1], flush=True)
            if options.backlog:
                restart = restart_scenario(servers["durable"][0], data_dir)
                print(restart, flush=True)
        finally:
            for process, _ in servers.values():
                if process.poll() is None:
                    process.terminate()
                    process.wait(30)
    leases = leases_part(options.leases) if options.leases else []
    print(f"load average after: {os.getloadavg()[0]:.2f}\n")
    print(
        "(no throughput rounds)"
        if not throughput
        else _table(
            throughput,
            [
                ("scenario", "scenario", ""),
                ("client", "client", ""),
                ("server", "server", ""),
                ("round", "round", ""),
                ("messages", "messages", ","),
                ("msg_per_s", "msg/s", ",.0f"),
            ],
        )
    )
    print()
    for round_ in range(1, options.repeat + 1):
        for scenario in dict.fromkeys(r["scenario"] for r in throughput):
            for client in clients:
                rows = {
                    r["server"]: r
                    for r in throughput
                    if r["scenario"] == scenario and r["client"] == client and r["round"] == round_
                }
                if len(rows) == 2:
                    ratio = rows["durable"]["msg_per_s"] / rows["memory"]["msg_per_s"]
                    print(f"round {round_}, {scenario}, {client}: durable / memory = {ratio:.2f}")
    if leases:
        print()
        print(
            _table(
                leases,
                [
                    ("server", "server", ""),
                    ("leased", "outstanding leases", ","),
                    ("rss_mib", "RSS MiB", ",.0f"),
                    ("peak_rss_mib", "peak RSS MiB", ",.0f"),
                    ("lease_seconds", "seconds to lease them", ".1f"),
                ],
            )
        )
    if not options.backlog:
        return 0
    print()
    print(
        _table(
            backlog,
            [
                ("server", "server", ""),
                ("messages", "backlog", ","),
                ("rss_mib", "RSS MiB", ",.0f"),
                ("peak_rss_mib", "peak RSS MiB", ",.0f"),
                ("pull_p50_ms", "Pull p50 ms", ".2f"),
                ("pull_p99_ms", "Pull p99 ms", ".2f"),
                ("fill_msg_per_s", "fill msg/s", ",.0f"),
            ],
        )
    )
    print(
        f"\ndurable restart with {options.backlog:,} stored: first Pull answered after "
        f"{restart['restart_to_first_pull_s']:.2f} s; RSS then "
        f"{restart['rss_after_restart_mib']:.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
