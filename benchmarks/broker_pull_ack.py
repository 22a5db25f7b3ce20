"""Broker-core benchmark: Pull + Acknowledge on the pure core, without gRPC.

Usage::

    .venv/bin/python benchmarks/broker_pull_ack.py [--messages 200000] [--repeat 3]
        [--sqlite]

The same loop as ``server_pull_ack.py`` (Pull 1,000, Acknowledge each response's ids, over a
pre-published backlog of 100-byte messages, plain and exactly-once), driven straight on a
``Broker`` with a fake clock and no history: what the delivery engine and the ack rules
cost, apart from the doors' decoding and encoding and grpc's own work. Reported: process
CPU a message over the whole loop and over its Pulls alone (the rest is the Acknowledges),
the best of ``--repeat`` runs. ``--sqlite`` also runs it on a ``SqliteStore`` (committed
after every call, as the server's group commit would) in a temporary directory.

To compare with another commit in the same session, run this file with
``PYTHONPATH=<that commit's src>``. Not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from eoclient._clock import FakeClock
from eoclient.server_stub.core import Broker
from eoclient.server_stub.core.model import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.store import Store

TOPIC = "projects/bench/topics/pull-ack"
SUBSCRIPTION = "projects/bench/subscriptions/pull-ack"
PAYLOAD = b"x" * 100
BATCH = 1000


def drain(messages: int, *, exactly_once: bool, store: Store | None) -> tuple[float, float]:
    """(CPU µs a message for the loop, for its Pulls alone)."""
    broker = Broker(FakeClock(), store=store, record_history=False)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(
        SubscriptionConfig(SUBSCRIPTION, TOPIC, enable_exactly_once_delivery=exactly_once)
    )
    for _ in range(0, messages, BATCH):
        broker.publishing.publish(TOPIC, [NewMessage(PAYLOAD) for _ in range(BATCH)])
        if store is not None:
            store.commit()
    received = 0
    pulls = 0.0
    started = time.process_time()
    while received < messages:
        before = time.process_time()
        deliveries = broker.leasing.pull(SUBSCRIPTION, BATCH)
        pulls += time.process_time() - before
        if not deliveries:
            break
        received += len(deliveries)
        broker.acks.acknowledge(SUBSCRIPTION, [d.ack_id for d in deliveries])
        if store is not None:
            store.commit()
    total = time.process_time() - started
    return total / received * 1e6, pulls / received * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sqlite", action="store_true", help="also on a SqliteStore")
    options = parser.parse_args()
    from eoclient.server_stub.storage.sqlite import SqliteStore

    load_before = os.getloadavg()[0]
    print("| store | subscription | CPU µs/msg | of which Pull |")
    print("|---|---|---:|---:|")
    for kind, exactly_once in (("plain", False), ("exactly-once", True)):
        best = min(
            drain(options.messages, exactly_once=exactly_once, store=None)
            for _ in range(options.repeat)
        )
        print(f"| memory | {kind} | {best[0]:.2f} | {best[1]:.2f} |")
    if options.sqlite:
        for kind, exactly_once in (("plain", False), ("exactly-once", True)):
            results = []
            for _ in range(options.repeat):
                with tempfile.TemporaryDirectory() as directory:
                    store = SqliteStore(directory)
                    try:
                        results.append(
                            drain(options.messages, exactly_once=exactly_once, store=store)
                        )
                    finally:
                        store.close()
            best = min(results)
            print(f"| SQLite | {kind} | {best[0]:.2f} | {best[1]:.2f} |")
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    sys.exit(main())
