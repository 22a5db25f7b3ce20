"""A publisher: messages spread over a few ordering keys, every message id collected.

Against a server (Google's emulator, ``eoclient serve``, or the real service)::

    python examples/publisher.py --endpoint 127.0.0.1:8085 \\
        --topic projects/my-project/topics/orders --count 1000 --create-topic

Self-contained, on an embedded reference server (creates the topic with the
AdminClient, publishes, prints a summary and exits)::

    python examples/publisher.py --demo

Messages are published without waiting one by one (``publish_nowait``), with ordering
key ``customer-<i % keys>``: the client batches them per key, keeps one batch of each
key in flight so the server receives every key's messages in order, and retries
transient failures. If a batch fails for good, its key is paused: the key's later
messages fail fast with ``OrderingKeyPausedError`` (see ``resume_publish``). Exit
status: 0 if every message got an id, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import Counter

from eoclient import PublisherClient
from eoclient.admin import AdminClient, topic_path
from eoclient.errors import AlreadyExists

DEMO_TOPIC = topic_path("eoclient-demo", "orders")
# Yield to the event loop every this many messages, so batches leave while the loop
# is still producing (publish_nowait itself never waits).
YIELD_EVERY = 100


async def ensure_topic(endpoint: str | None, topic: str) -> None:
    async with AdminClient(endpoint) as admin:
        try:
            created = await admin.create_topic(topic, labels={"created-by": "eoclient-example"})
        except AlreadyExists:
            print(f"topic {topic} already exists", flush=True)
        else:
            print(f"created topic {created.name}", flush=True)


async def publish(endpoint: str | None, topic: str, count: int, keys: int) -> int:
    """Publish ``count`` messages over ``keys`` ordering keys; print a summary line."""
    started = time.monotonic()
    async with PublisherClient(endpoint, enable_message_ordering=keys > 0) as client:
        futures: list[asyncio.Future[str]] = []
        for i in range(count):
            key = f"customer-{i % keys}" if keys else ""
            data = f"order {i}".encode()
            futures.append(client.publish_nowait(topic, data, ordering_key=key, sequence=str(i)))
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        results = await asyncio.gather(*futures, return_exceptions=True)
        rpcs = client.statistics().publish_rpcs
    elapsed = max(time.monotonic() - started, 1e-9)
    errors = Counter(type(r).__name__ for r in results if isinstance(r, BaseException))
    for result in results:
        if isinstance(result, BaseException):
            print(f"first failure: {result}", file=sys.stderr, flush=True)
            break
    failed = sum(errors.values())
    details = "".join(f" {name}={n}" for name, n in sorted(errors.items()))
    print(
        f"summary: published={count - failed} failed={failed}{details} keys={keys} "
        f"publish_rpcs={rpcs} throughput={count / elapsed:.0f} msg/s",
        flush=True,
    )
    return 0 if failed == 0 else 1


async def demo(count: int, keys: int) -> int:
    from eoclient.server_stub import run_server

    async with run_server() as server:
        print(f"embedded reference server on {server.address}", flush=True)
        await ensure_topic(server.address, DEMO_TOPIC)
        return await publish(server.address, DEMO_TOPIC, count, keys)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint",
        help="host:port of the server (default: PUBSUB_EMULATOR_HOST, else the real service)",
    )
    parser.add_argument("--topic", help="projects/{project}/topics/{name}")
    parser.add_argument("--count", type=int, default=1000, help="how many messages (default 1000)")
    parser.add_argument(
        "--keys",
        type=int,
        default=4,
        help="ordering keys to spread the messages over; 0 = no ordering (default 4)",
    )
    parser.add_argument(
        "--create-topic", action="store_true", help="create the topic first if it does not exist"
    )
    parser.add_argument(
        "--demo", action="store_true", help="run on an embedded reference server and exit"
    )
    args = parser.parse_args(argv)
    if args.count < 0 or args.keys < 0:
        parser.error("--count and --keys must be >= 0")
    if args.demo:
        return await demo(args.count, args.keys)
    if not args.topic:
        parser.error("--topic is required (or use --demo)")
    if args.create_topic:
        await ensure_topic(args.endpoint, args.topic)
    return await publish(args.endpoint, args.topic, args.count, args.keys)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
