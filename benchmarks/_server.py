"""The reference server the benchmarks measure against, in a process of its own, and the
messages they pre-publish to it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any


def start_server(*extra_args: str) -> tuple[subprocess.Popen[str], str]:
    """Start ``eoclient serve`` on a free port (``extra_args``: more of its flags, e.g.
    ``--data-dir DIR``); return the process and its host:port."""
    server = subprocess.Popen(
        [sys.executable, "-m", "eoclient.cli", "serve", "--port", "0", *extra_args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        if line.startswith("export PUBSUB_EMULATOR_HOST="):
            return server, line.strip().split("=", 1)[1]
    server.wait(timeout=10)
    raise RuntimeError("eoclient serve exited before printing its address")


# Messages the benchmarks pre-publish: 100-byte payloads, 1,000 per Publish call.
PAYLOAD = b"x" * 100
PUBLISH_BATCH = 1000


async def fill_subscription(
    address: str,
    topic: str,
    subscription: str,
    count: int,
    attributes: Callable[[int], dict[str, str]] | None = None,
    **subscription_fields: Any,
) -> list[str]:
    """Create ``topic`` and ``subscription`` on it (``subscription_fields``: more Subscription
    fields), publish ``count`` messages (``attributes(i)`` for the i-th) and return their ids.

    Raw transport calls, not a client: the set-up stays out of what the clients measure. The
    protobuf modules are imported here, not at module level: a consumer process of the
    official client must not load eoclient's copy of the same descriptors.
    """
    from eoclient._proto import pubsub_pb2
    from eoclient._transport import Endpoint, PubSubTransport, create_channel

    transport = PubSubTransport(create_channel(Endpoint.resolve(address)))
    try:
        await transport.call(
            "Publisher", "CreateTopic", pubsub_pb2.Topic(name=topic), pubsub_pb2.Topic
        )
        await transport.call(
            "Subscriber",
            "CreateSubscription",
            pubsub_pb2.Subscription(name=subscription, topic=topic, **subscription_fields),
            pubsub_pb2.Subscription,
        )
        ids: list[str] = []
        for start in range(0, count, PUBLISH_BATCH):
            batch = [
                pubsub_pb2.PubsubMessage(
                    data=PAYLOAD, attributes=attributes(i) if attributes is not None else {}
                )
                for i in range(start, min(count, start + PUBLISH_BATCH))
            ]
            ids += await transport.publish(topic, batch)
        return ids
    finally:
        await transport.close()
