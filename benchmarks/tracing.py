"""Tracing benchmark: what OpenTelemetry tracing costs a publisher or a subscriber,
eoclient's and the official client's, measured in the same run against one reference server.

    .venv/bin/python benchmarks/tracing.py [--side publish|subscribe] [--messages 50000]
        [--repeat 3] [--baseline GIT_REF] [--write]

Starts ``eoclient serve`` in its own process; every run uses a process of its own for the
client measured. ``--side publish`` (the default) publishes ``--messages`` 100-byte
messages to a fresh topic (no subscription: the server only assigns ids),
fire-and-collect as ``benchmarks/publisher.py`` does, with default batch settings.
``--side subscribe`` pre-publishes ``--messages`` 100-byte messages, each carrying a
sampled ``googclient_traceparent`` (as a traced publisher leaves them), to a fresh
subscription and receives them, acking each without waiting (``message.ack()``;
FlowControl(max_messages=1000)), as ``benchmarks/subscriber.py``'s plain scenario does.
Scenarios:

* ``eoclient, before tracing``: the SDK's source at ``--baseline`` (default: the commit
  before that side's tracing was added), extracted from git and put first on the child's
  path — the reference for "tracing off costs nothing";
* ``eoclient, tracing off`` and ``tracing on``;
* ``official, tracing off`` and ``tracing on`` (google-cloud-pubsub, the peer).

With tracing on, the child installs an OpenTelemetry SDK tracer provider with a batch span
processor whose exporter only counts spans (the cost of making and processing spans, not
of shipping them anywhere); the count is reported, so a run that traced nothing shows.

Runs are interleaved (every scenario once, then again, ``--repeat`` times), so the load of
the shared machine falls on all of them alike; the median run of each is reported, with
its ratios against ``tracing off`` of the same client. Client CPU is the client process's
user + system time (imports and set-up excluded). Appended to docs/benchmarks.md only with
``--write``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# benchmarks/ is on sys.path when run as a script
from _server import fill_subscription, start_server

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
YIELD_EVERY = 100  # eoclient: messages between two yields to the event loop
# This benchmark's section of docs/benchmarks.md (--write adds each run at its end).
SECTION = "## Tracing (`benchmarks/tracing.py`)"
# The last commit before eoclient.tracing existed (the publisher then had no tracing hooks),
# and the last before the subscriber's (its session then had no tracing hooks).
BEFORE_TRACING = {"publish": "d4aa24e", "subscribe": "cc6849f"}
# What a traced publisher leaves in each message (a sampled W3C trace context).
TRACEPARENT = {"googclient_traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
FLOW_CONTROL_MESSAGES = 1000

SCENARIOS = (
    ("eoclient", "before tracing"),
    ("eoclient", "tracing off"),
    ("eoclient", "tracing on"),
    ("official", "tracing off"),
    ("official", "tracing on"),
)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------- the child process


def _install_tracing() -> Any:
    """A tracer provider whose exporter counts the spans it is given."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Counting(SpanExporter):
        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Any) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

    exporter = Counting()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider, exporter


async def _publish_eoclient(address: str, topic: str, count: int, traced: bool) -> float:
    from eoclient import PublisherClient

    options = {"enable_open_telemetry_tracing": True} if traced else {}
    started = time.perf_counter()
    async with PublisherClient(address, **options) as client:
        futures = []
        for i in range(count):
            futures.append(client.publish_nowait(topic, PAYLOAD))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        await asyncio.gather(*futures)
    return time.perf_counter() - started


def _publish_official(address: str, topic: str, count: int, traced: bool) -> float:
    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    options = pubsub_v1.types.PublisherOptions(enable_open_telemetry_tracing=traced)
    publisher = pubsub_v1.PublisherClient(publisher_options=options)
    started = time.perf_counter()
    futures = [publisher.publish(topic, PAYLOAD) for _ in range(count)]
    for future in futures:
        future.result()
    publisher.stop()
    return time.perf_counter() - started


def publish_main(options: argparse.Namespace) -> None:
    traced = options.mode == "tracing on"
    provider = exporter = None
    if traced:
        provider, exporter = _install_tracing()
    if options.client == "eoclient":
        import eoclient

        source = str(Path(eoclient.__file__).parent)
        before = _cpu()
        seconds = asyncio.run(
            _publish_eoclient(options.address, options.target, options.count, traced)
        )
    else:
        import google.cloud.pubsub_v1  # noqa: F401  (imports are not part of the measurement)

        source = "google-cloud-pubsub"
        before = _cpu()
        seconds = _publish_official(options.address, options.target, options.count, traced)
    if provider is not None:
        provider.force_flush()
    cpu = _cpu() - before
    spans = exporter.spans if exporter is not None else 0
    report = {"seconds": seconds, "cpu_seconds": cpu, "spans": spans, "source": source}
    print(json.dumps(report), flush=True)


async def _consume_eoclient(address: str, subscription: str, count: int, traced: bool) -> float:
    from eoclient import FlowControl, SubscriberClient

    options = {"enable_open_telemetry_tracing": True} if traced else {}
    flow = FlowControl(max_messages=FLOW_CONTROL_MESSAGES)
    started = time.perf_counter()
    received = 0
    async with (
        SubscriberClient(address, **options) as client,
        client.subscribe(subscription, flow_control=flow) as stream,
    ):
        async for message in stream:
            message.ack()
            received += 1
            if received >= count:
                break
    return time.perf_counter() - started


def _consume_official(address: str, subscription: str, count: int, traced: bool) -> float:
    import threading

    os.environ["PUBSUB_EMULATOR_HOST"] = address
    from google.cloud import pubsub_v1

    lock = threading.Lock()
    received = 0
    finished = threading.Event()

    def callback(message: Any) -> None:
        nonlocal received
        message.ack()
        with lock:
            received += 1
            if received >= count:
                finished.set()

    options = pubsub_v1.types.SubscriberOptions(enable_open_telemetry_tracing=traced)
    subscriber = pubsub_v1.SubscriberClient(subscriber_options=options)
    started = time.perf_counter()
    future = subscriber.subscribe(
        subscription,
        callback,
        flow_control=pubsub_v1.types.FlowControl(max_messages=FLOW_CONTROL_MESSAGES),
    )
    finished.wait()
    future.cancel()
    future.result()
    subscriber.close()
    return time.perf_counter() - started


def consume_main(options: argparse.Namespace) -> None:
    traced = options.mode == "tracing on"
    provider = exporter = None
    if traced:
        provider, exporter = _install_tracing()
    if options.client == "eoclient":
        import eoclient

        source = str(Path(eoclient.__file__).parent)
        before = _cpu()
        seconds = asyncio.run(
            _consume_eoclient(options.address, options.target, options.count, traced)
        )
    else:
        os.environ["PUBSUB_EMULATOR_HOST"] = options.address
        import google.cloud.pubsub_v1  # noqa: F401  (imports are not part of the measurement)

        source = "google-cloud-pubsub"
        before = _cpu()
        seconds = _consume_official(options.address, options.target, options.count, traced)
    if provider is not None:
        provider.force_flush()
    cpu = _cpu() - before
    spans = exporter.spans if exporter is not None else 0
    report = {"seconds": seconds, "cpu_seconds": cpu, "spans": spans, "source": source}
    print(json.dumps(report), flush=True)


# ---------------------------------------------------------------- orchestration


def extract_source(ref: str, into: Path) -> Path:
    """``src/eoclient`` at git ``ref``, under ``into`` (put first on a child's path)."""
    archive = subprocess.run(
        ["git", "archive", ref, "src/eoclient"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into / "src"


async def _create_topic(address: str, topic: str) -> None:
    from eoclient.admin import AdminClient

    async with AdminClient(address) as admin:
        await admin.create_topic(topic)


def run_once(
    side: str, address: str, client: str, mode: str, count: int, number: int, baseline: Path
) -> dict[str, Any]:
    topic = f"projects/bench/topics/tracing-{side}-{number}"
    if side == "publish":
        target = topic
        asyncio.run(_create_topic(address, topic))
    else:
        target = f"projects/bench/subscriptions/tracing-{number}"
        asyncio.run(
            fill_subscription(address, topic, target, count, attributes=lambda _: TRACEPARENT)
        )
    env = dict(os.environ)
    if mode == "before tracing":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(baseline), env.get("PYTHONPATH")]))
    command = [sys.executable, __file__, side, "--client", client, "--mode", mode]
    command += ["--address", address, "--target", target, "--count", str(count)]
    output = subprocess.run(
        command, check=True, capture_output=True, text=True, timeout=1800, env=env
    ).stdout
    result: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    result["msg_per_s"] = count / result["seconds"]
    result["cpu_us_per_msg"] = result["cpu_seconds"] / count * 1e6
    return result


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    for side in ("publish", "subscribe"):
        child = sub.add_parser(side)
        child.add_argument("--client", choices=["eoclient", "official"], required=True)
        child.add_argument("--mode", choices=[mode for _, mode in SCENARIOS], required=True)
        child.add_argument("--address", required=True)
        child.add_argument("--target", required=True, help="the topic or subscription")
        child.add_argument("--count", type=int, required=True)
    parser.add_argument("--side", choices=["publish", "subscribe"], default="publish")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario (median)")
    parser.add_argument(
        "--baseline", help="git ref without tracing (default: the side's last before it)"
    )
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    options = parser.parse_args()
    if options.command == "publish":
        publish_main(options)
        return 0
    if options.command == "subscribe":
        consume_main(options)
        return 0
    options.baseline = options.baseline or BEFORE_TRACING[options.side]

    load_before = _uptime()
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {s: [] for s in SCENARIOS}
    server, address = start_server()
    try:
        with tempfile.TemporaryDirectory() as work:
            baseline = extract_source(options.baseline, Path(work))
            number = 0
            for _ in range(options.repeat):
                for scenario in SCENARIOS:
                    number += 1
                    result = run_once(
                        options.side, address, *scenario, options.messages, number, baseline
                    )
                    if scenario[1] == "before tracing":
                        assert result["source"].startswith(work), result["source"]
                    runs[scenario].append(result)
                    print(
                        f"{scenario[0]:9} {scenario[1]:15} {result['msg_per_s']:>10,.0f} msg/s "
                        f"{result['cpu_us_per_msg']:>7.1f} µs/msg spans={result['spans']}",
                        flush=True,
                    )
    finally:
        server.terminate()
        server.wait(timeout=10)
    load_after = _uptime()

    median = {s: sorted(r, key=lambda x: x["cpu_us_per_msg"])[len(r) // 2] for s, r in runs.items()}
    lines = [
        "| client | scenario | msg/s | client CPU µs/msg | CPU vs tracing off | "
        "spans a message | runs (CPU µs/msg) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for client, mode in SCENARIOS:
        result = median[client, mode]
        off = median[client, "tracing off"]["cpu_us_per_msg"]
        spread = ", ".join(f"{r['cpu_us_per_msg']:.1f}" for r in runs[client, mode])
        lines.append(
            f"| {client} | {mode} | {result['msg_per_s']:,.0f} | {result['cpu_us_per_msg']:.1f} | "
            f"{result['cpu_us_per_msg'] / off:.2f}× | {result['spans'] / options.messages:.2f} | "
            f"{spread} |"
        )
    table = "\n".join(lines)
    print(table)
    print(f"load before: {load_before}\nload after:  {load_after}")
    if options.write:
        today = datetime.date.today().isoformat()
        command = (
            f"benchmarks/tracing.py --side {options.side} --messages {options.messages} "
            f"--repeat {options.repeat} --baseline {options.baseline}"
        )
        what = "publisher" if options.side == "publish" else "subscriber"
        run = (
            f"### Tracing, {what}, {today} (`{command}`; `uptime` before: {load_before}; "
            f"after: {load_after})\n\n{table}\n\n"
        )
        docs = ROOT / "docs" / "benchmarks.md"
        text = docs.read_text()
        # Newest run last in this benchmark's own section (before the next section).
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        end = len(text) if end < 0 else end + 1
        docs.write_text(text[:end].rstrip("\n") + "\n\n" + run + text[end:].lstrip("\n"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
