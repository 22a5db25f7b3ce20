"""``eoclient demo``: the end-to-end exactly-once round trip on an embedded reference server.

Creates a topic and an exactly-once subscription over gRPC, publishes N messages,
consumes them with ``ack_with_response`` and prints what happened.
"""

from __future__ import annotations

import asyncio
import collections
import time
from dataclasses import dataclass

from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.server_stub import run_server
from eoclient.subscriber import AcknowledgeStatus, FlowControl, Message, SubscriberClient

PUBLISH_BATCH = 1000  # the service's limit of messages per PublishRequest


@dataclass(frozen=True)
class DemoSummary:
    published: int
    received: int
    duplicates: int
    statuses: dict[str, int]
    seconds: float

    @property
    def ok(self) -> bool:
        return (
            self.received == self.published
            and self.duplicates == 0
            and self.statuses == {AcknowledgeStatus.SUCCESS.name: self.published}
        )

    def render(self) -> str:
        rate = self.received / self.seconds if self.seconds else 0.0
        statuses = ", ".join(f"{name}={count}" for name, count in sorted(self.statuses.items()))
        return (
            f"published {self.published}, received {self.received}, duplicates "
            f"{self.duplicates}\nack_with_response: {statuses}\n"
            f"consumed in {self.seconds:.2f} s ({rate:,.0f} msg/s)\n"
            f"exactly once: {'yes' if self.ok else 'NO'}"
        )


async def _create(transport: PubSubTransport, topic: str, subscription: str) -> None:
    await transport.call("Publisher", "CreateTopic", pubsub_pb2.Topic(name=topic), pubsub_pb2.Topic)
    await transport.call(
        "Subscriber",
        "CreateSubscription",
        pubsub_pb2.Subscription(name=subscription, topic=topic, enable_exactly_once_delivery=True),
        pubsub_pb2.Subscription,
    )


async def run_demo(messages: int = 10_000, payload_bytes: int = 100) -> DemoSummary:
    topic = "projects/demo/topics/events"
    subscription = "projects/demo/subscriptions/events-exactly-once"
    async with run_server(record_history=False) as server:
        transport = PubSubTransport(create_channel(Endpoint.resolve(server.address)))
        try:
            await _create(transport, topic, subscription)
            for start in range(0, messages, PUBLISH_BATCH):
                count = min(PUBLISH_BATCH, messages - start)
                await transport.publish(
                    topic,
                    [
                        pubsub_pb2.PubsubMessage(
                            data=f"{start + i:08d}".encode().ljust(payload_bytes, b".")
                        )
                        for i in range(count)
                    ],
                )
        finally:
            await transport.close()

        statuses: collections.Counter[str] = collections.Counter()
        seen: collections.Counter[str] = collections.Counter()
        done = asyncio.Event()

        async def handle(message: Message) -> None:
            status = await message.ack_with_response()
            statuses[status.name] += 1
            if sum(statuses.values()) >= messages:
                done.set()

        started = time.perf_counter()
        async with (
            SubscriberClient(server.address) as client,
            client.subscribe(subscription, flow_control=FlowControl(max_messages=1000)) as stream,
            asyncio.TaskGroup() as handlers,
        ):
            receiving = True
            while receiving:
                message = await anext(stream)
                seen[message.message_id] += 1
                handlers.create_task(handle(message))
                receiving = len(seen) < messages
            await done.wait()
        elapsed = time.perf_counter() - started
    return DemoSummary(
        published=messages,
        received=sum(seen.values()),
        duplicates=sum(count - 1 for count in seen.values()),
        statuses=dict(statuses),
        seconds=elapsed,
    )


def main(messages: int) -> int:
    summary = asyncio.run(run_demo(messages))
    print(summary.render())
    return 0 if summary.ok else 1
