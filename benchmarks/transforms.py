"""Message transforms: what a small JavaScript UDF costs a message, on publish and on delivery.

Usage::

    .venv/bin/python benchmarks/transforms.py [--messages 20000] [--rounds 5] [--write]

One ``eoclient serve`` (its own process), four topics: one plain, one with a topic UDF, and
for delivery one subscription without and one with a subscription UDF (each on a plain
topic of its own). The UDF is the kind the service's samples show: it reads the payload,
changes it and adds an attribute. Publish: 1,000 messages of 100 bytes a request, one
request at a time. Delivery: unary Pull of 1,000 and Acknowledge, until every message came.
The with/without pairs alternate, ``--rounds`` times, in the same session, and each row is
the median of its rounds, so the difference is the transform's cost on this machine's load:
one call into V8 a batch (docs/server/transforms.md), the JSON both ways, the results
read back. Reported per message: wall time of the loop, and the server process's CPU time
(from /proc: the engine's threads included).

Not a test: nothing here asserts a speed. ``--write`` appends the table to
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import sys
import time
from pathlib import Path

import grpc
from _server import PAYLOAD, PUBLISH_BATCH, start_server
from google.protobuf import empty_pb2

from eoclient._proto import pubsub_pb2 as pb

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
UDF = pb.MessageTransform(
    javascript_udf=pb.JavaScriptUDF(
        function_name="tag",
        code=(
            "function tag(message, metadata) {"
            "  message.attributes['seen'] = metadata.message_id || 'topic';"
            "  message.data = message.data.toUpperCase();"
            "  return message; }"
        ),
    )
)


def process_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


class Calls:
    def __init__(self, address: str) -> None:
        self.channel = grpc.aio.insecure_channel(address)

    def unary(self, service: str, method: str, response: type) -> object:
        return self.channel.unary_unary(
            f"/google.pubsub.v1.{service}/{method}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response.FromString,
        )


async def publish_all(calls: Calls, topic: str, count: int) -> None:
    publish = calls.unary("Publisher", "Publish", pb.PublishResponse)
    message = pb.PubsubMessage(data=PAYLOAD)
    for start in range(0, count, PUBLISH_BATCH):
        n = min(PUBLISH_BATCH, count - start)
        await publish(pb.PublishRequest(topic=topic, messages=[message] * n))  # type: ignore[operator]


async def drain(calls: Calls, subscription: str, count: int) -> None:
    pull = calls.unary("Subscriber", "Pull", pb.PullResponse)
    ack = calls.unary("Subscriber", "Acknowledge", empty_pb2.Empty)
    got = 0
    while got < count:
        answer = await pull(  # type: ignore[operator]
            pb.PullRequest(subscription=subscription, max_messages=1000, return_immediately=True)
        )
        ids = [m.ack_id for m in answer.received_messages]
        if ids:
            await ack(pb.AcknowledgeRequest(subscription=subscription, ack_ids=ids))  # type: ignore[operator]
        got += len(ids)


async def measure(
    address: str, pid: int, messages: int, rounds: int
) -> dict[str, list[tuple[float, float]]]:
    calls = Calls(address)
    create_topic = calls.unary("Publisher", "CreateTopic", pb.Topic)
    create_sub = calls.unary("Subscriber", "CreateSubscription", pb.Subscription)
    results: dict[str, list[tuple[float, float]]] = {}
    for round_ in range(rounds):
        for label, transforms in (("publish, no transform", []), ("publish, topic UDF", [UDF])):
            topic = f"projects/bench/topics/p{round_}-{len(transforms)}"
            await create_topic(pb.Topic(name=topic, message_transforms=transforms))  # type: ignore[operator]
            cpu, started = process_cpu(pid), time.perf_counter()
            await publish_all(calls, topic, messages)
            results.setdefault(label, []).append(
                (time.perf_counter() - started, process_cpu(pid) - cpu)
            )
        for label, transforms in (
            ("delivery, no transform", []),
            ("delivery, subscription UDF", [UDF]),
        ):
            topic = f"projects/bench/topics/d{round_}-{len(transforms)}"
            sub = f"projects/bench/subscriptions/d{round_}-{len(transforms)}"
            await create_topic(pb.Topic(name=topic))  # type: ignore[operator]
            await create_sub(  # type: ignore[operator]
                pb.Subscription(name=sub, topic=topic, message_transforms=transforms)
            )
            await publish_all(calls, topic, messages)
            cpu, started = process_cpu(pid), time.perf_counter()
            await drain(calls, sub, messages)
            results.setdefault(label, []).append(
                (time.perf_counter() - started, process_cpu(pid) - cpu)
            )
    await calls.channel.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    server, address = start_server()
    try:
        results = asyncio.run(measure(address, server.pid, args.messages, args.rounds))
    finally:
        server.terminate()
        server.wait(timeout=10)
    rows = []
    for label, samples in results.items():
        wall = statistics.median(s for s, _ in samples) / args.messages * 1e6
        cpu = statistics.median(c for _, c in samples) / args.messages * 1e6
        rows.append(f"| {label} | {args.messages} | {wall:.1f} | {cpu:.1f} |")
    table = "\n".join(
        [
            f"Measured {datetime.date.today()}, {args.rounds} rounds, medians "
            f"(load average {os.getloadavg()[0]:.1f}):",
            "",
            "| case | messages | wall µs/msg | server CPU µs/msg |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    print(table)
    if args.write:
        with DOCS.open("a") as docs:
            docs.write("\n" + table + "\n")


if __name__ == "__main__":
    sys.exit(main())
