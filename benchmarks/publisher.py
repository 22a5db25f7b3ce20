"""Publisher benchmark: eoclient vs google-cloud-pubsub against one reference server.

    .venv/bin/python benchmarks/publisher.py [--messages 200000] [--keys 10] [--write]

Starts ``eoclient serve`` in its own process and, for each scenario, creates a fresh
topic (with the AdminClient; no subscription, so the server only assigns ids), then
runs the publisher in a process of its own and reads back what it measured:

* plain: no ordering keys;
* ordered: ordering enabled, messages spread round-robin over ``--keys`` keys.

Both publishers use their default batch settings (100 messages / 1 MB / 10 ms, the
same in both) and default flow control (none), and publish fire-and-collect:
eoclient ``publish_nowait`` (yielding to the event loop every 100 messages) then one
``gather``; official ``publish()`` then ``future.result()`` for each.

Reported per run: messages per second (first publish to last message id, closing
included), client CPU microseconds per message (user + system of the publisher
process, imports and client construction excluded), and the publisher's peak RSS.
``--profile`` runs the eoclient publisher under cProfile instead and prints the top
functions. Results are appended to docs/benchmarks.md only with ``--write``.

``--baseline-src DIR`` compares this checkout's library with another one's (``git archive
OLD src | tar -x -C DIR``): each eoclient run is preceded by one with ``DIR/src`` first on
the publisher's import path, the two alternating against the same server, and both medians
(by CPU) are reported; the official client is left out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _server import process_cpu, start_server  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
YIELD_EVERY = 100  # eoclient: messages between two yields to the event loop


def _usage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


def _key(index: int, keys: int) -> str:
    return f"key-{index % keys}" if keys else ""


# ---------------------------------------------------------------- publishers


async def _publish_eoclient(address: str, topic: str, count: int, keys: int) -> dict[str, Any]:
    from eoclient import PublisherClient

    before = _usage()
    started = time.perf_counter()
    async with PublisherClient(address, enable_message_ordering=keys > 0) as client:
        futures = []
        for i in range(count):
            futures.append(client.publish_nowait(topic, PAYLOAD, ordering_key=_key(i, keys)))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        results = await asyncio.gather(*futures, return_exceptions=True)
        rpcs = client.statistics().publish_rpcs
    elapsed = time.perf_counter() - started
    failed = sum(isinstance(r, BaseException) for r in results)
    return {"seconds": elapsed, "before": before, "failed": failed, "rpcs": rpcs}


def _publish_official(address: str, topic: str, count: int, keys: int) -> dict[str, Any]:
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    options = pubsub_v1.types.PublisherOptions(enable_message_ordering=keys > 0)
    publisher = pubsub_v1.PublisherClient(publisher_options=options)
    before = _usage()
    started = time.perf_counter()
    futures = [publisher.publish(topic, PAYLOAD, ordering_key=_key(i, keys)) for i in range(count)]
    failed = 0
    for future in futures:
        try:
            future.result()
        except Exception:
            failed += 1
    publisher.stop()
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "before": before, "failed": failed, "rpcs": None}


def publish_main(options: argparse.Namespace) -> None:
    if options.client == "eoclient":
        import eoclient  # noqa: F401  (imports are not part of the measurement)

        run = asyncio.run(
            _publish_eoclient(options.address, options.topic, options.count, options.keys)
        )
    else:
        import google.cloud.pubsub_v1  # noqa: F401

        run = _publish_official(options.address, options.topic, options.count, options.keys)
    after = _usage()
    print(
        json.dumps(
            {
                "seconds": run["seconds"],
                "cpu_seconds": after["cpu"] - run["before"]["cpu"],
                "peak_rss_mib": after["rss_mib"],
                "failed": run["failed"],
                "rpcs": run["rpcs"],
            }
        ),
        flush=True,
    )


def profile_main(options: argparse.Namespace) -> None:
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    asyncio.run(_publish_eoclient(options.address, options.topic, options.count, options.keys))
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


# ---------------------------------------------------------------- orchestration


async def _create_topic(address: str, topic: str) -> None:
    from eoclient.admin import AdminClient

    async with AdminClient(address) as admin:
        await admin.create_topic(topic)


def run_scenario(
    address: str,
    client: str,
    keys: int,
    count: int,
    index: int,
    server_pid: int,
    profile: bool = False,
    library_src: str | None = None,
) -> dict[str, float]:
    mode = f"ordered{keys}" if keys else "plain"
    topic = f"projects/bench/topics/pub-{index}-{client}-{mode}"
    asyncio.run(_create_topic(address, topic))
    command = [
        sys.executable,
        __file__,
        "profile" if profile else "publish",
        "--client",
        client,
        "--address",
        address,
        "--topic",
        topic,
        "--count",
        str(count),
        "--keys",
        str(keys),
    ]
    if profile:
        subprocess.run(command, check=True, timeout=1800)
        return {}
    env = None
    if library_src is not None:
        # PYTHONPATH comes before site-packages, where the editable install points here.
        env = {**os.environ, "PYTHONPATH": library_src}
    server_before = process_cpu(server_pid)
    output = subprocess.run(
        command, check=True, capture_output=True, text=True, timeout=1800, env=env
    )
    server_cpu = process_cpu(server_pid) - server_before
    result: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    result["server_cpu_us_per_msg"] = server_cpu / count * 1e6
    result["messages"] = count
    result["msg_per_s"] = count / result["seconds"]
    result["cpu_us_per_msg"] = result["cpu_seconds"] / count * 1e6
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    for name in ("publish", "profile"):
        child = sub.add_parser(name)
        child.add_argument("--client", choices=["eoclient", "official"], required=True)
        child.add_argument("--address", required=True)
        child.add_argument("--topic", required=True)
        child.add_argument("--count", type=int, required=True)
        child.add_argument("--keys", type=int, default=0)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--keys", type=int, default=10, help="ordering keys in the ordered runs (default 10)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per scenario; the median is reported"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile the eoclient publisher instead"
    )
    parser.add_argument(
        "--profile-keys", type=int, default=0, help="--profile: ordering keys (default none)"
    )
    parser.add_argument(
        "--write", action="store_true", help="append the table to docs/benchmarks.md"
    )
    parser.add_argument(
        "--baseline-src",
        help="a checkout (with src/eoclient) whose library alternates with this one's",
    )
    options = parser.parse_args()
    if options.command == "publish":
        publish_main(options)
        return 0
    if options.command == "profile":
        profile_main(options)
        return 0

    server, address = start_server()
    try:
        if options.profile:
            run_scenario(
                address, "eoclient", options.profile_keys, options.messages, 0, server.pid, True
            )
            return 0
        if options.baseline_src:
            return _compare(options, address, server.pid)
        rows = []
        scenarios = [
            ("eoclient", 0),
            ("official", 0),
            ("eoclient", options.keys),
            ("official", options.keys),
        ]
        for index, (client, keys) in enumerate(scenarios):
            runs = [
                run_scenario(
                    address, client, keys, options.messages, index * 100 + repeat, server.pid
                )
                for repeat in range(options.repeat)
            ]
            # The run with the median throughput (the machine is shared; say so).
            result = sorted(runs, key=lambda r: r["msg_per_s"])[len(runs) // 2]
            result["spread"] = max(r["msg_per_s"] for r in runs) / min(r["msg_per_s"] for r in runs)
            mode = f"{keys} ordering keys" if keys else "no ordering keys"
            rows.append((client, mode, result))
            print(
                f"{client:9} {mode:18} {result['messages']:>7} msgs "
                f"{result['msg_per_s']:>10,.0f} msg/s {result['cpu_us_per_msg']:>7.1f} µs/msg "
                f"{result['peak_rss_mib']:>7.1f} MiB server {result['server_cpu_us_per_msg']:.1f} "
                f"µs/msg rpcs={result['rpcs']} failed={result['failed']:.0f} "
                f"max/min={result['spread']:.2f}",
                flush=True,
            )
    finally:
        server.terminate()
        server.wait(timeout=10)
    if options.write:
        lines = [
            "",
            f"### Publisher, {time.strftime('%Y-%m-%d')} (`{' '.join(sys.argv)}`)",
            "",
            "| client | mode | messages | msg/s | client CPU µs/msg | peak RSS MiB "
            "| server CPU µs/msg |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for client, mode, r in rows:
            lines.append(
                f"| {client} | {mode} | {r['messages']:.0f} | {r['msg_per_s']:,.0f} | "
                f"{r['cpu_us_per_msg']:.1f} | {r['peak_rss_mib']:.0f} | "
                f"{r['server_cpu_us_per_msg']:.1f} |"
            )
        with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
            handle.write("\n".join(lines) + "\n")
    return 0


def _compare(options: argparse.Namespace, address: str, server_pid: int) -> int:
    """This library against ``--baseline-src``'s, alternating run by run (CPU medians)."""
    baseline = str(Path(options.baseline_src).resolve() / "src")
    for keys in (0, options.keys):
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "this checkout": []}
        for repeat in range(options.repeat):
            for offset, (label, src) in enumerate(
                (("baseline", baseline), ("this checkout", None))
            ):
                index = 1000 + keys * 100 + repeat * 2 + offset
                runs[label].append(
                    run_scenario(
                        address,
                        "eoclient",
                        keys,
                        options.messages,
                        index,
                        server_pid,
                        library_src=src,
                    )
                )
        for label, results in runs.items():
            cpu = sorted(r["cpu_us_per_msg"] for r in results)
            rate = sorted(r["msg_per_s"] for r in results)
            print(
                f"{label:14} keys={keys:<3} median {cpu[len(cpu) // 2]:.2f} µs/msg "
                f"{rate[len(rate) // 2]:,.0f} msg/s (runs: {', '.join(f'{c:.2f}' for c in cpu)})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
