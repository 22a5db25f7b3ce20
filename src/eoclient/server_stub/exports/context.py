"""What every export worker shares (``ExportContext``) and how a worker reads its
subscription: the stored config (``export_config``), the topic's schema settings, the
leases it holds and the ack or nack that ends them."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from eoclient._clock import Clock
from eoclient._proto import pubsub_pb2
from eoclient.errors import RpcError
from eoclient.server_stub.buckets import BucketStore
from eoclient.server_stub.core import Broker, Delivery, SubscriptionView
from eoclient.server_stub.exports.status import BIGQUERY, CLOUD_STORAGE

# Largest number of ack ids in one ack or modack call of a worker (the broker takes any
# number; this bounds the time one call holds the event loop).
ACK_CHUNK = 10_000
# A message that cannot be written is given back with its lease set to this many seconds
# when the subscription has no retry policy: it comes back (a failed delivery attempt) after
# a pause instead of at once, so that a message that can never be written does not spin.
UNWRITABLE_HOLD_SECONDS = 10


# What leaves a subscription passes through its message transforms first (transforms/):
# given the subscription and what was leased, the deliveries to write (the stage settles the
# ones its UDFs filtered out or failed).
Deliver = Callable[[str, list[Delivery]], Awaitable[list[Delivery]]]


async def deliver_unchanged(_subscription: str, deliveries: list[Delivery]) -> list[Delivery]:
    return deliveries


@dataclass
class ExportContext:
    broker: Broker
    clock: Clock
    buckets: BucketStore
    work_dir: Path  # the batches' files (and, when durable, their lease journals)
    durable: bool  # journal leases (a server with --data-dir)
    tasks: asyncio.TaskGroup
    random: random.Random
    deliver: Deliver = deliver_unchanged

    def new_id(self) -> str:
        return f"{self.random.getrandbits(128):032x}"

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> int:
        """Ack ``ack_ids`` (the subscription may be gone: nothing then); how many were
        confirmed."""
        confirmed = 0
        for start in range(0, len(ack_ids), ACK_CHUNK):
            with contextlib.suppress(RpcError):
                reply = self.broker.acks.acknowledge(name, ack_ids[start : start + ACK_CHUNK])
                confirmed += len(ack_ids[start : start + ACK_CHUNK]) - len(reply.failures)
        return confirmed

    def modack(self, name: str, ack_ids: Sequence[str], seconds: int) -> None:
        for start in range(0, len(ack_ids), ACK_CHUNK):
            with contextlib.suppress(RpcError):
                self.broker.acks.modify_ack_deadline(
                    name, ack_ids[start : start + ACK_CHUNK], seconds
                )

    def give_back(self, name: str, ack_ids: Sequence[str]) -> None:
        """Nack: the messages wait in the subscription again (the delivery counts as an
        attempt, as any nack does)."""
        self.modack(name, ack_ids, 0)

    def refuse(self, name: str, ack_ids: Sequence[str], has_retry_policy: bool) -> None:
        """Messages that cannot be written: a failed delivery (docs/protocol.md#export-delivery)."""
        self.modack(name, ack_ids, 0 if has_retry_policy else UNWRITABLE_HOLD_SECONDS)


@dataclass(frozen=True)
class ExportConfig:
    kind: str  # CLOUD_STORAGE or BIGQUERY
    view: SubscriptionView
    subscription: pubsub_pb2.Subscription  # the stored extras, decoded


def export_kind(subscription: pubsub_pb2.Subscription) -> str | None:
    if subscription.HasField("cloud_storage_config") and subscription.cloud_storage_config.bucket:
        return CLOUD_STORAGE
    if subscription.HasField("bigquery_config") and subscription.bigquery_config.table:
        return BIGQUERY
    return None


def export_config(broker: Broker, name: str) -> ExportConfig | None:
    """The export ``name`` is now; None if it is gone, detached or not an export."""
    try:
        view = broker.subscriptions.get(name)
    except RpcError:
        return None
    config = view.config
    if config.detached or not config.extras:
        return None
    subscription = pubsub_pb2.Subscription.FromString(config.extras)
    kind = export_kind(subscription)
    if kind is None:
        return None
    return ExportConfig(kind, view, subscription)


def topic_schema_settings(broker: Broker, topic: str) -> pubsub_pb2.SchemaSettings | None:
    """The topic's schema settings (None: no topic, or no schema)."""
    try:
        extras = broker.topics.get(topic).config.extras
    except RpcError:
        return None
    if not extras:
        return None
    topic_pb = pubsub_pb2.Topic.FromString(extras)
    if not topic_pb.HasField("schema_settings") or not topic_pb.schema_settings.schema:
        return None
    return topic_pb.schema_settings
