"""A small consumer service: one handler per message, every ack's exactly-once result awaited.

Against a server (Google's emulator, ``eoclient serve``, or the real service)::

    python examples/consumer_service.py --endpoint 127.0.0.1:8085 \\
        --subscription projects/my-project/subscriptions/orders

Self-contained, on an embedded reference server (creates a topic and an exactly-once
subscription, publishes a few messages, consumes them and exits)::

    python examples/consumer_service.py --demo

SIGTERM or SIGINT (Ctrl-C) stops the service: it stops pulling, messages it never
handed to the handler and those whose handler was interrupted are nacked (so another
consumer gets them at once), acks already sent are flushed, and it prints a summary
and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from collections import Counter

from eoclient import AcknowledgeStatus, FlowControl, Message, SubscriberClient

DEMO_TOPIC = "projects/eoclient-demo/topics/orders"
DEMO_SUBSCRIPTION = "projects/eoclient-demo/subscriptions/orders-service"


class ConsumerService:
    """Counts what it handles; ``finished`` is set once ``expected`` messages are settled."""

    def __init__(self, expected: int | None = None, *, verbose: bool = False) -> None:
        self.expected = expected
        self.verbose = verbose
        self.statuses: Counter[str] = Counter()
        self.seen: set[str] = set()
        self.duplicates = 0
        self.finished = asyncio.Event()
        self.started = time.monotonic()

    async def handle(self, message: Message) -> None:
        if message.message_id in self.seen:
            self.duplicates += 1
        self.seen.add(message.message_id)
        await self.process(message)
        # On an exactly-once subscription SUCCESS means: never delivered again.
        status = await message.ack_with_response()
        self.statuses[status.name] += 1
        if status is not AcknowledgeStatus.SUCCESS:
            print(f"ack of {message.message_id}: {status.name}", file=sys.stderr, flush=True)
        elif self.verbose:
            print(f"acked {message.message_id}", flush=True)
        if self.expected is not None and self.settled >= self.expected:
            self.finished.set()

    async def process(self, message: Message) -> None:
        """The application's work; here, a parse and a yield to the event loop."""
        message.data.decode("utf-8", errors="replace")
        await asyncio.sleep(0)

    @property
    def settled(self) -> int:
        return sum(self.statuses.values())

    def summary(self) -> str:
        elapsed = max(time.monotonic() - self.started, 1e-9)
        other = {k: v for k, v in sorted(self.statuses.items()) if k != "SUCCESS"}
        details = "".join(f" {name}={count}" for name, count in other.items())
        return (
            f"summary: received={len(self.seen) + self.duplicates} "
            f"SUCCESS={self.statuses['SUCCESS']} other={sum(other.values())}{details} "
            f"duplicates={self.duplicates} throughput={self.settled / elapsed:.0f} msg/s"
        )


async def serve(
    client: SubscriberClient, subscription: str, service: ConsumerService, max_messages: int
) -> None:
    """Run the handler until SIGTERM / SIGINT, or until ``service.finished``."""
    loop = asyncio.get_running_loop()
    runner = asyncio.create_task(
        client.run(
            subscription, service.handle, flow_control=FlowControl(max_messages=max_messages)
        )
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, runner.cancel)
    finished = asyncio.create_task(service.finished.wait())
    try:
        await asyncio.wait({runner, finished}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        finished.cancel()
        runner.cancel()
        # The runner's own cancellation is how it stops; anything else it raised
        # (e.g. NotFound for a deleted subscription) propagates.
        with contextlib.suppress(asyncio.CancelledError):
            await runner
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise asyncio.CancelledError


async def demo(messages: int, max_messages: int) -> None:
    from eoclient.server_stub import run_server
    from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig

    async with run_server() as server:
        server.broker.topics.create(TopicConfig(DEMO_TOPIC))
        server.broker.subscriptions.create(
            SubscriptionConfig(DEMO_SUBSCRIPTION, DEMO_TOPIC, enable_exactly_once_delivery=True)
        )
        for start in range(0, messages, 1000):
            server.broker.publishing.publish(
                DEMO_TOPIC,
                [
                    NewMessage(data=f"order {i}".encode())
                    for i in range(start, min(messages, start + 1000))
                ],
            )
        print(f"published {messages} messages to {DEMO_TOPIC} on {server.address}", flush=True)
        service = ConsumerService(expected=messages)
        async with SubscriberClient(server.address) as client:
            await serve(client, DEMO_SUBSCRIPTION, service, max_messages)
        print(service.summary(), flush=True)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--endpoint",
        help="host:port of the server (default: PUBSUB_EMULATOR_HOST, else the real service)",
    )
    parser.add_argument("--subscription", help="projects/{project}/subscriptions/{name}")
    parser.add_argument(
        "--max-messages",
        type=int,
        default=100,
        help="flow control: at most this many messages in the handler at once (default 100)",
    )
    parser.add_argument("--verbose", action="store_true", help="print a line per message acked")
    parser.add_argument(
        "--demo", action="store_true", help="run on an embedded reference server and exit"
    )
    parser.add_argument(
        "--messages", type=int, default=20, help="--demo: how many messages (default 20)"
    )
    args = parser.parse_args(argv)
    if args.demo:
        await demo(args.messages, args.max_messages)
        return 0
    if not args.subscription:
        parser.error("--subscription is required (or use --demo)")
    service = ConsumerService(verbose=args.verbose)
    async with SubscriberClient(args.endpoint) as client:
        print(f"consuming {args.subscription}; SIGTERM or Ctrl-C to stop", flush=True)
        await serve(client, args.subscription, service, args.max_messages)
    print(service.summary(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
