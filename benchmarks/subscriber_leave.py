"""How long leaving a ``subscribe()`` stream takes, and how soon what it held comes back.

Usage::

    .venv/bin/python benchmarks/subscriber_leave.py [--rounds 21] [--plain]

Against ``eoclient serve`` in a process of its own, on an exactly-once subscription (plain
with ``--plain``), each round publishes one message, opens a stream, takes the message and
leaves by ``break``. Two kinds of round, alternating:

* ``unsettled``: the message is left unsettled (the README's loop, stopped early): leaving
  nacks it (docs/protocol.md#subscriber-shutdown), then a unary Pull takes it again;
* ``settled``: the peer, the same loop with the message acked first
  (``ack_with_response``, its answer awaited before the ``break``).

Reported, for each kind: the median and the worst time from the ``break`` to the end of
the ``async with`` (the exit), and for ``unsettled`` the time from the end of the exit to
the redelivery in hand. Not a test: nothing here asserts a number. The results go to
docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _server import start_server

import eoclient

PROJECT = "bench"


async def one_round(
    client: eoclient.SubscriberClient,
    publisher: eoclient.PublisherClient,
    topic: str,
    subscription: str,
    *,
    settle: bool,
) -> tuple[float, float | None]:
    """One message out and back; (exit seconds, redelivery seconds or None)."""
    await publisher.publish(topic, b"one")
    async with client.subscribe(subscription) as stream:
        async for message in stream:
            if settle:
                await message.ack_with_response()
            left = time.perf_counter()
            break
    exited = time.perf_counter()
    if settle:
        return exited - left, None
    while True:  # the nacked message, at once (a Pull may come back empty: ask again)
        again = await client.pull(subscription, max_messages=1)
        if again:
            break
    back = time.perf_counter()
    await again[0].ack_with_response()
    return exited - left, back - exited


async def measure(address: str, rounds: int, exactly_once: bool) -> None:
    topic = f"projects/{PROJECT}/topics/leave"
    subscription = f"projects/{PROJECT}/subscriptions/leave"
    async with eoclient.AdminClient(address) as admin:
        await admin.create_topic(topic)
        await admin.create_subscription(
            subscription, topic, enable_exactly_once_delivery=exactly_once
        )
    exits: dict[str, list[float]] = {"unsettled": [], "settled": []}
    redeliveries: list[float] = []
    async with (
        eoclient.SubscriberClient(address) as client,
        eoclient.PublisherClient(address) as publisher,
    ):
        for _ in range(rounds):
            for kind in ("unsettled", "settled"):
                exit_s, back_s = await one_round(
                    client, publisher, topic, subscription, settle=kind == "settled"
                )
                exits[kind].append(exit_s)
                if back_s is not None:
                    redeliveries.append(back_s)
    mode = "exactly-once" if exactly_once else "plain"
    print(f"{mode}, {rounds} rounds of each kind (milliseconds: median / worst)")
    for kind, values in exits.items():
        print(f"  exit, {kind:9}: {ms(statistics.median(values))} / {ms(max(values))}")
    print(
        f"  redelivery after an unsettled exit: {ms(statistics.median(redeliveries))} / "
        f"{ms(max(redeliveries))}"
    )


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--plain", action="store_true", help="a subscription without exactly-once")
    args = parser.parse_args()
    server, address = start_server()
    try:
        asyncio.run(measure(address, args.rounds, exactly_once=not args.plain))
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
