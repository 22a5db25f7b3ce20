"""Shared set-up for the broker-core tests: one broker on a fake clock, one topic."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eoclient._clock import FakeClock
from eoclient.server_stub.core import (
    AckReply,
    Broker,
    Delivery,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.delivery import StreamFlow
from eoclient.server_stub.core.store import Store

PROJECT = "projects/p1"
TOPIC = "projects/p1/topics/topic-a"
SUB = "projects/p1/subscriptions/sub-a"
DLT = "projects/p1/topics/dead-letters"

INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"
UNORDERED = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"


# Set per test by tests/server_stub/core/conftest.py: every Env's broker runs on a store from
# it (MemoryStore when None), and each Env made is recorded there for its restart check.
STORE_FACTORY: Callable[[], Store] | None = None
CREATED: list[Env] = []


class Env:
    """A broker with ``TOPIC`` created; helpers default to ``SUB``."""

    def __init__(self, clock: FakeClock | None = None, **broker_options: Any) -> None:
        self.clock = clock or FakeClock()
        self.store = STORE_FACTORY() if STORE_FACTORY is not None else None
        self.broker = Broker(self.clock, store=self.store, **broker_options)
        self.broker.topics.create(TopicConfig(TOPIC))
        CREATED.append(self)

    def subscribe(self, name: str = SUB, **kwargs: Any) -> str:
        self.broker.subscriptions.create(SubscriptionConfig(name, TOPIC, **kwargs))
        return name

    def publish(self, *datas: str, key: str = "") -> list[str]:
        return self.broker.publishing.publish(
            TOPIC, [NewMessage(data.encode(), ordering_key=key) for data in datas]
        )

    def pull(self, max_messages: int = 100, sub: str = SUB) -> list[Delivery]:
        return self.broker.leasing.pull(sub, max_messages)

    def ack(self, *ack_ids: str, sub: str = SUB) -> AckReply:
        return self.broker.acks.acknowledge(sub, list(ack_ids))

    def modack(self, seconds: int, *ack_ids: str, sub: str = SUB) -> AckReply:
        return self.broker.acks.modify_ack_deadline(sub, list(ack_ids), seconds)

    def nack(self, *ack_ids: str, sub: str = SUB) -> AckReply:
        return self.modack(0, *ack_ids, sub=sub)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.broker.tick()

    def flow(self, stream_id: int) -> StreamFlow:
        """The stream's flow-control counters (no public accessor: read the core's state)."""
        name = self.broker.leasing.stream_subscription(stream_id)
        assert name is not None
        flow = self.broker._resources.subscriptions[name].delivery.streams.get(stream_id)
        assert flow is not None
        return flow


def data(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.message.data.decode() for d in deliveries]


def ids(deliveries: Sequence[Delivery]) -> list[str]:
    return [d.ack_id for d in deliveries]
