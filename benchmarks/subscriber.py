"""Subscriber benchmark: eoclient vs google-cloud-pubsub, side by side in one run.

    .venv/bin/python benchmarks/subscriber.py [--messages 200000] [--official-eod-messages N]
        [--uvloop] [--repeat 1] [--emulator-messages 3000] [--profile MODE] [--write]

Starts ``eoclient serve`` in its own process (and, with ``--emulator-messages``, Google's
Pub/Sub emulator), and for each scenario pre-publishes the messages (100 bytes each) to a
fresh subscription, then runs the consumer in a process of its own and reads back what it
measured:

* plain: the consumer acks without waiting (``message.ack()``);
* eod: exactly-once subscription, every ack's result awaited (eoclient: a task per
  message awaiting ``message.ack_with_response()``; official:
  ``ack_with_response().result()`` inside the callback, or, as ``official-callback``,
  ``ack_with_response().add_done_callback(...)``, which does not hold a callback thread);
* batch (eoclient only): exactly-once subscription, ``async for batch in
  stream.batches(max_messages=1000)`` and a task per batch awaiting
  ``batch.ack_with_response()``, every status checked.

With ``--uvloop`` the eoclient scenarios run a second time on uvloop (``uvloop.run``).

On the emulator only the exactly-once scenarios run: it answers exactly-once acks only
through unary calls (no stream confirmations), the path the real service takes too.

Reported per run: messages per second (from subscribe to the last result, closing
included), client CPU microseconds per message (user + system of the consumer process from
subscribe to the last result; the client library is imported before, as an application
would have it loaded already), the consumer's peak RSS, and the ratios the goals are stated
in. ``--repeat N`` runs every scenario N times and reports the median run (by CPU).
``--profile MODE`` also runs that eoclient consumer under cProfile and prints its CPU by
part. Results are appended to docs/benchmarks.md only with ``--write``.

``--baseline-src DIR`` compares this checkout's library with another one's (e.g. ``git
archive OLD src | tar -x -C DIR``): every eoclient scenario also runs with ``DIR/src``
first on the consumer's import path, the two alternating run by run against the same
server, so a change in the machine's load falls on both. ``--eoclient-only`` leaves the
official client's scenarios out (for such before/after comparisons).

``--core RUNS`` measures only the session's synchronous cores (dispatch core and ack
ledger: receive, take, settle, the ledger's requests and, under exactly-once, the stream
confirmations), no event loop, no server: each mode RUNS times (alternating with the
baseline's, with ``--baseline-src``), the least CPU a message reported. On a shared
machine it resolves a few per cent where the end-to-end runs swing by ten.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import GoogleEmulator, fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent


def _usage() -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss_mib": _peak_rss_mib(usage)}


def _peak_rss_mib(usage: resource.struct_rusage) -> float:
    """This process's peak resident set since it started.

    Not ``ru_maxrss`` where /proc can say: Linux carries ``ru_maxrss`` across ``execve``
    from the process that forked, so a consumer started by this script (which has gRPC and
    eoclient loaded, ~46 MiB) would report at least that much whatever it used itself.
    ``VmHWM`` is the high-water mark of the consumer's own address space.
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return usage.ru_maxrss / 1024


# ---------------------------------------------------------------- consumers


async def _consume_eoclient(address: str, subscription: str, count: int, mode: str) -> float:
    from eoclient import AcknowledgeStatus, FlowControl, SubscriberClient

    done = asyncio.Event()
    settled = 0
    failed = 0  # results other than SUCCESS (none is expected)

    async def handle(message: Any) -> None:
        nonlocal settled, failed
        failed += await message.ack_with_response() is not AcknowledgeStatus.SUCCESS
        settled += 1
        if settled >= count:
            done.set()

    async def settle(batch: Any) -> None:
        nonlocal settled, failed
        statuses = await batch.ack_with_response()
        failed += sum(status is not AcknowledgeStatus.SUCCESS for status in statuses)
        settled += len(batch)
        if settled >= count:
            done.set()

    started = time.perf_counter()
    tasks: set[asyncio.Task[None]] = set()
    received = 0
    async with (
        SubscriberClient(address) as client,
        client.subscribe(subscription, flow_control=FlowControl(max_messages=1000)) as stream,
    ):
        if mode == "eod":
            async for message in stream:
                task = asyncio.create_task(handle(message))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                received += 1
                if received >= count:
                    break
            await done.wait()
        elif mode == "batch":
            async for batch in stream.batches(max_messages=1000):
                task = asyncio.create_task(settle(batch))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                received += len(batch)
                if received >= count:
                    break
            await done.wait()
        else:
            async for message in stream:
                message.ack()
                received += 1
                if received >= count:
                    break
    if failed:
        raise RuntimeError(f"{failed} acks did not succeed")
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
    # The client library is loaded before the measurement starts, as in an application
    # that has been running: its import (and grpc's, and protobuf's) is no part of
    # receiving messages, and at 60,000 messages was an eighth of the CPU measured.
    if options.client == "eoclient":
        import eoclient  # noqa: F401
    else:
        os.environ["PUBSUB_EMULATOR_HOST"] = options.address
        from google.cloud import pubsub_v1  # noqa: F401
    run: Any = asyncio.run
    if options.loop == "uvloop":
        import uvloop

        run = uvloop.run
    before = _usage()
    profile: dict[str, float] = {}
    if options.client == "eoclient":
        coroutine = _consume_eoclient(
            options.address, options.subscription, options.count, options.mode
        )
        if options.profile:
            profiler = cProfile.Profile()
            elapsed = profiler.runcall(run, coroutine)
            profile = _by_part(profiler, options.count)
        else:
            elapsed = run(coroutine)
    else:
        elapsed = _consume_official(
            options.address,
            options.subscription,
            options.count,
            options.mode == "eod",
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
    """Own time (µs per message) by part: eoclient module, or the library it is spent in
    (the main thread's; gRPC's poller thread is not profiled)."""
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
            part = "benchmark (its consumer loop and tasks)"
        elif filename == "~" and any(wait in function for wait in ("'poll'", "'select'")):
            # cProfile's clock is the wall clock (a CPU clock read per call would swamp
            # what it measures): time the loop spends waiting in epoll is no CPU.
            continue
        elif filename == "~":
            part = "builtins: " + function.split(" of ")[0].strip("<>").removeprefix("method ")
            part = part if len(part) < 60 else "builtins"
        else:
            part = "other"
        parts[part] += own / count * 1e6
    return dict(sorted(parts.items(), key=lambda item: -item[1])[:16])


# ---------------------------------------------------------------- the cores alone

CORE_MODES = ("plain", "eod", "batch")


def core_main(mode: str) -> None:
    """Print the client CPU µs a message of the cores' hot path (``--core``)."""
    from eoclient._proto import pubsub_pb2
    from eoclient.subscriber.dispatch import Dispatcher
    from eoclient.subscriber.ledger import AckLedger, AckMode, Operation, Position
    from eoclient.subscriber.message import Message
    from eoclient.subscriber.settings import (
        AckRetrySettings,
        FlowControl,
        LeaseSettings,
        StreamSettings,
    )
    from eoclient.subscriber.waiters import deliver

    now = 1000.0
    exactly_once = mode != "plain"

    class Sink:  # the session's place: messages settle through it
        def settle(self, message: Message, operation: Operation, seconds: int) -> Position:
            return dispatch.settle(message, operation, seconds, now)

        def extend(self, message: Message, seconds: int) -> Position:
            return dispatch.extend(message, seconds, now)

    ledger = AckLedger(AckRetrySettings())
    ledger.mode = AckMode.STREAM  # a server that confirms on the stream, as ours does
    dispatch = Dispatcher(
        ledger,
        Sink(),
        flow_control=FlowControl(max_messages=1000),
        lease=LeaseSettings(),
        stream=StreamSettings(),
    )
    per_response, responses = 500, 200
    wire = []
    for number in range(responses):
        response = pubsub_pb2.StreamingPullResponse(
            received_messages=[
                pubsub_pb2.ReceivedMessage(
                    ack_id=f"a{number}-{index}",
                    message=pubsub_pb2.PubsubMessage(data=b"x" * 100, message_id=str(index)),
                )
                for index in range(per_response)
            ]
        )
        response.subscription_properties.exactly_once_delivery_enabled = exactly_once
        wire.append(response)

    def send_and_confirm() -> None:
        requests = ledger.take(now, stream_open=True, stopping=False).stream
        if not exactly_once:
            return
        confirmation = pubsub_pb2.StreamingPullResponse()
        for request in requests:
            confirmation.acknowledge_confirmation.ack_ids.extend(request.ack_ids)
            confirmation.modify_ack_deadline_confirmation.ack_ids.extend(
                request.modify_deadline_ack_ids
            )
        deliver(ledger.on_confirmation(confirmation)[0])

    started = time.process_time()
    for response in wire:
        dispatch.on_response(response, now)
        send_and_confirm()  # the receipt modacks
        if mode == "batch":
            dispatch.settle_batch(dispatch.take_up_to(1000), Operation.ACK, 0, now)
        else:
            while (message := dispatch.take()) is not None:
                dispatch.settle(message, Operation.ACK, 0, now)
        send_and_confirm()  # the acks
    elapsed = time.process_time() - started
    if dispatch.out or dispatch.ready or not ledger.idle():
        raise RuntimeError("the core benchmark left messages unsettled")
    print(json.dumps({"cpu_us_per_msg": elapsed / (per_response * responses) * 1e6}))


def run_core(mode: str, library_src: str | None) -> float:
    env = None
    if library_src is not None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([library_src, *_pythonpath()])}
    output = subprocess.run(
        [sys.executable, __file__, "core", "--mode", mode],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    result: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    return result["cpu_us_per_msg"]


def core_comparison(runs: int, baseline_src: str | None) -> list[str]:
    """Each mode ``runs`` times (alternating with the baseline's); the least of each."""
    lines = []
    for mode in CORE_MODES:
        current: list[float] = []
        baseline: list[float] = []
        for _ in range(runs):
            if baseline_src is not None:
                baseline.append(run_core(mode, baseline_src))
            current.append(run_core(mode, None))
        line = f"cores alone, {mode}: {min(current):.2f} µs/msg"
        if baseline:
            change = 100 * (min(current) / min(baseline) - 1)
            line += f" against the baseline library's {min(baseline):.2f} ({change:+.1f} %)"
        lines.append(line + f" (least of {runs} runs)")
        print(lines[-1], flush=True)
    return lines


# ---------------------------------------------------------------- orchestration


@dataclass(frozen=True)
class Scenario:
    client: str  # eoclient, official, official-callback
    mode: str  # plain, eod, batch
    loop: str = "asyncio"  # the eoclient consumer's event loop: asyncio or uvloop

    @property
    def exactly_once(self) -> bool:
        return self.mode != "plain"

    @property
    def label(self) -> str:
        if self.client == "eoclient":
            return "eoclient" + (" on uvloop" if self.loop == "uvloop" else "")
        return "google-cloud-pubsub " + _official_version()

    @property
    def description(self) -> str:
        if self.mode == "plain":
            return "plain ack"
        if self.mode == "batch":
            return "exactly-once, `stream.batches(1000)`, every batch's statuses awaited"
        if self.client == "eoclient":
            return "exactly-once, every result awaited (task per message)"
        if self.client == "official-callback":
            return "exactly-once, `add_done_callback` on each result"
        return "exactly-once, `ack_with_response().result()`"


def _official_version() -> str:
    from importlib.metadata import version

    return version("google-cloud-pubsub")


def run_scenario(
    address: str,
    scenario: Scenario,
    count: int,
    index: int,
    *,
    profile: bool = False,
    library_src: str | None = None,
) -> dict[str, Any]:
    """One run of ``scenario``; with ``library_src``, the consumer imports eoclient from
    that directory (a baseline checkout's ``src``) instead of this checkout's."""
    run = f"{index}-{scenario.client}-{scenario.mode}-{scenario.loop}-{os.getpid()}"
    topic = f"projects/bench/topics/t-{run}"
    subscription = f"projects/bench/subscriptions/s-{run}"
    asyncio.run(
        fill_subscription(
            address, topic, subscription, count, enable_exactly_once_delivery=scenario.exactly_once
        )
    )
    command = [
        sys.executable,
        __file__,
        "consume",
        "--client",
        scenario.client,
        "--mode",
        scenario.mode,
        "--loop",
        scenario.loop,
        "--address",
        address,
        "--subscription",
        subscription,
        "--count",
        str(count),
    ] + (["--profile"] if profile else [])
    env = None
    if library_src is not None:
        # PYTHONPATH comes before site-packages, where the editable install points here.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([library_src, *_pythonpath()])}
    output = subprocess.run(
        command, check=True, capture_output=True, text=True, timeout=1800, env=env
    )
    result: dict[str, Any] = json.loads(output.stdout.strip().splitlines()[-1])
    result["messages"] = count
    result["msg_per_s"] = count / result["seconds"]
    result["cpu_us_per_msg"] = result["cpu_seconds"] / count * 1e6
    return result


def _pythonpath() -> list[str]:
    return [part for part in os.environ.get("PYTHONPATH", "").split(os.pathsep) if part]


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median CPU a message (the upper one of an even count)."""
    return sorted(runs, key=lambda r: r["cpu_us_per_msg"])[len(runs) // 2]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    consume = sub.add_parser("consume")
    consume.add_argument(
        "--client", choices=["eoclient", "official", "official-callback"], required=True
    )
    consume.add_argument("--mode", choices=["plain", "eod", "batch"], required=True)
    consume.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    consume.add_argument("--address", required=True)
    consume.add_argument("--subscription", required=True)
    consume.add_argument("--count", type=int, required=True)
    consume.add_argument("--profile", action="store_true")
    core = sub.add_parser("core")
    core.add_argument("--mode", choices=CORE_MODES, required=True)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument(
        "--official-eod-messages",
        type=int,
        default=0,
        help="fewer messages for the official client's awaited-EOD run (it manages ~800 msg/s)",
    )
    parser.add_argument(
        "--uvloop", action="store_true", help="also run the eoclient scenarios on uvloop"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs of each scenario; the median is reported"
    )
    parser.add_argument(
        "--emulator-messages",
        type=int,
        default=0,
        help="also run the exactly-once scenarios on Google's emulator with this many messages",
    )
    parser.add_argument(
        "--profile",
        choices=["plain", "eod", "batch"],
        help="profile this eoclient consumer under cProfile (own CPU by part)",
    )
    parser.add_argument(
        "--baseline-src",
        help="also run every eoclient scenario with the library in DIR/src (alternating)",
        metavar="DIR",
    )
    parser.add_argument(
        "--eoclient-only", action="store_true", help="leave out the official client's scenarios"
    )
    parser.add_argument(
        "--core",
        type=int,
        default=0,
        metavar="RUNS",
        help="measure only the synchronous cores, RUNS times a mode (no server, no scenarios)",
    )
    parser.add_argument(
        "--write", action="store_true", help="append the table to docs/benchmarks.md"
    )
    options = parser.parse_args()
    if options.command == "consume":
        consume_main(options)
        return 0
    if options.command == "core":
        core_main(options.mode)
        return 0

    load_before = os.getloadavg()
    baseline_src = None
    if options.baseline_src:
        baseline_src = str(Path(options.baseline_src).resolve() / "src")
        if not Path(baseline_src, "eoclient").is_dir():
            parser.error(f"--baseline-src: no eoclient package in {baseline_src}")
    if options.core:
        core_comparison(options.core, baseline_src)
        print(f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
        return 0
    scenarios = [
        Scenario("eoclient", "plain"),
        Scenario("official", "plain"),
        Scenario("eoclient", "eod"),
        Scenario("official", "eod"),
        Scenario("eoclient", "batch"),
    ]
    if options.uvloop:
        scenarios += [Scenario("eoclient", mode, "uvloop") for mode in ("plain", "eod", "batch")]
    if options.eoclient_only:
        scenarios = [s for s in scenarios if s.client == "eoclient"]
    rows: list[tuple[str, Scenario, dict[str, Any]]] = []
    server, address = start_server()
    try:
        for index, scenario in enumerate(scenarios):
            count = options.messages
            if scenario.client == "official" and scenario.mode == "eod":
                count = options.official_eod_messages or count
            if baseline_src is not None and scenario.client == "eoclient":
                baseline, current = [], []
                for attempt in range(options.repeat):
                    number = index * 100 + 2 * attempt
                    baseline.append(
                        run_scenario(address, scenario, count, number, library_src=baseline_src)
                    )
                    current.append(run_scenario(address, scenario, count, number + 1))
                rows.append(_report("baseline library", scenario, median_run(baseline)))
                rows.append(_report("reference server", scenario, median_run(current)))
                continue
            runs = [
                run_scenario(address, scenario, count, index * 100 + attempt)
                for attempt in range(options.repeat)
            ]
            rows.append(_report("reference server", scenario, median_run(runs)))
        if options.profile:
            scenario = Scenario("eoclient", options.profile)
            result = run_scenario(address, scenario, options.messages, 9999, profile=True)
            print(f"eoclient {options.profile}, own CPU by part (µs/msg, under cProfile):")
            for part, micros in result["profile"].items():
                print(f"  {micros:7.2f}  {part}")
    finally:
        server.terminate()
        server.wait(timeout=10)
    if options.emulator_messages:
        with GoogleEmulator() as emulator:
            for index, client in enumerate(["eoclient", "official", "official-callback"]):
                scenario = Scenario(client, "eod")
                result = run_scenario(emulator, scenario, options.emulator_messages, 20 + index)
                rows.append(_report("Google's emulator", scenario, result))
    load = f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after"
    summary = _ratios(rows)
    print(load)
    for line in summary:
        print(line)
    if options.write:
        _write(rows, load, summary)
    return 0


def _report(
    server: str, scenario: Scenario, result: dict[str, Any]
) -> tuple[str, Scenario, dict[str, Any]]:
    print(
        f"{server:17} {scenario.label:28} {scenario.mode:5} {result['messages']:>7} msgs "
        f"{result['msg_per_s']:>10,.0f} msg/s {result['cpu_us_per_msg']:>7.1f} µs/msg "
        f"{result['peak_rss_mib']:>7.1f} MiB",
        flush=True,
    )
    return server, scenario, result


def _ratios(rows: list[tuple[str, Scenario, dict[str, Any]]]) -> list[str]:
    """The goals' ratios, from the reference server's rows of this run."""
    found = {(s.client, s.mode, s.loop): r for server, s, r in rows if server == "reference server"}
    lines = []
    for loop in ("asyncio", "uvloop"):
        plain, eod, batch = (
            found.get(("eoclient", mode, loop)) for mode in ("plain", "eod", "batch")
        )
        official_plain = found.get(("official", "plain", "asyncio"))
        official_eod = found.get(("official", "eod", "asyncio"))
        if plain is None:
            continue
        lines.append(f"eoclient on {loop}:")
        if official_plain:
            lines.append(
                f"  plain: {plain['cpu_us_per_msg']:.1f} µs/msg, "
                f"{plain['msg_per_s'] / official_plain['msg_per_s']:.1f}× the official msg/s, "
                f"peak RSS {100 * plain['peak_rss_mib'] / official_plain['peak_rss_mib']:.0f} %"
            )
        if eod and official_eod:
            lines.append(
                f"  exactly-once awaited: {eod['cpu_us_per_msg']:.1f} µs/msg, "
                f"{eod['msg_per_s'] / official_eod['msg_per_s']:.1f}× the official msg/s, "
                f"peak RSS {100 * eod['peak_rss_mib'] / official_eod['peak_rss_mib']:.0f} %"
            )
        if batch:
            lines.append(
                f"  batch API, exactly-once: {batch['cpu_us_per_msg']:.1f} µs/msg, "
                f"{batch['msg_per_s']:,.0f} msg/s"
            )
    baselines = {(s.mode, s.loop): r for server, s, r in rows if server == "baseline library"}
    for (mode, loop), base in baselines.items():
        now = found.get(("eoclient", mode, loop))
        if now is not None:
            lines.append(
                f"{mode} on {loop}, this checkout against the baseline library: "
                f"{now['cpu_us_per_msg']:.1f} vs {base['cpu_us_per_msg']:.1f} µs/msg "
                f"({100 * (now['cpu_us_per_msg'] / base['cpu_us_per_msg'] - 1):+.1f} %), "
                f"{now['msg_per_s']:,.0f} vs {base['msg_per_s']:,.0f} msg/s"
            )
    return lines


def _write(rows: list[tuple[str, Scenario, dict[str, Any]]], load: str, summary: list[str]) -> None:
    lines = [
        "",
        f"### Subscriber, {time.strftime('%Y-%m-%d %H:%M')} (`{' '.join(sys.argv)}`, {load})",
        "",
        "| server | client | mode | messages | msg/s | client CPU µs/msg | peak RSS MiB |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for server, scenario, r in rows:
        lines.append(
            f"| {server} | {scenario.label} | {scenario.description} | {r['messages']:.0f} | "
            f"{r['msg_per_s']:,.0f} | {r['cpu_us_per_msg']:.1f} | {r['peak_rss_mib']:.0f} |"
        )
    lines += ["", *(f"    {line}" for line in summary)]
    with (ROOT / "docs" / "benchmarks.md").open("a") as handle:
        handle.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
