"""Where transforms meet messages: a Publish on its way in, deliveries on their way out.

One ``MessageTransforms`` per server, beside the services (the broker core never runs
JavaScript). Each resource's chain is compiled on first use and cached with the
resource's ``extras`` it came from; a changed config (an update, a resource created again
under the same name) makes a new chain and frees the old one. A resource without
transforms costs one dict lookup and an identity comparison per call.

* **Topics** (``publish``): every message of the request goes through the topic's chain
  before anything is stored; what is stored is what the chain returned. A filtered
  message is not stored, and its place in the response gets an id of its own that no
  stored message has (the publisher's client expects one id per message it sent). A
  failed message refuses the whole request, INVALID_ARGUMENT naming it: nothing is
  stored.
* **Subscriptions** (``deliver``): every way messages leave a subscription (Pull,
  StreamingPull, push, exports) hands its leased deliveries here. A filtered message is
  acknowledged by the server; a failed one is nacked, so the subscription's retry policy
  and dead-letter policy apply to it as to a message its subscriber refused; the rest
  leave transformed.

The rules are in docs/protocol.md#message-transforms.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from google.protobuf.message import Message

from eoclient._proto import pubsub_pb2
from eoclient.errors import InvalidArgument, NotFound
from eoclient.server_stub.core import Broker, Delivery
from eoclient.server_stub.transforms.config import check_transforms, transforms_key, udfs_of
from eoclient.server_stub.transforms.engine import Chain, MessageIn
from eoclient.server_stub.transforms.rules import (
    Failed,
    Filtered,
    Transformed,
    TransformLimits,
    Udf,
    enabled,
)

__all__ = ["MessageTransforms", "StagedPublish", "TransformCounts"]

logger = logging.getLogger("eoclient.server_stub.transforms")


@dataclass
class TransformCounts:
    """Messages a resource's transforms have handled since the server started."""

    transformed: int = 0
    filtered: int = 0
    failed: int = 0


@dataclass
class _Entry:
    extras: bytes  # the resource's extras this entry was made from (compared by identity)
    key: bytes  # transforms_key of its transforms
    udfs: tuple[Udf, ...]
    chain: Chain | None  # None: no enabled transform


@dataclass
class StagedPublish:
    """A Publish after the topic's transforms: ``request`` holds the messages to store,
    ``filtered`` the positions (in the original request) of those filtered out."""

    request: pubsub_pb2.PublishRequest
    filtered: list[int] = field(default_factory=list)

    def message_ids(self, stored: Sequence[str], reserve: Callable[[int], list[str]]) -> list[str]:
        """One id per message of the original request, in its order: the stored
        messages' ids, and for each filtered one an id ``reserve`` sets aside."""
        if not self.filtered:
            return list(stored)
        spare = iter(reserve(len(self.filtered)))
        kept = iter(stored)
        gone = set(self.filtered)
        total = len(stored) + len(self.filtered)
        return [next(spare) if i in gone else next(kept) for i in range(total)]


class MessageTransforms:
    """The transforms of one broker's topics and subscriptions (``limits``: per UDF)."""

    def __init__(self, broker: Broker, limits: TransformLimits | None = None) -> None:
        self.broker = broker
        self.limits = limits or TransformLimits()
        self._topics: dict[str, _Entry] = {}
        self._subscriptions: dict[str, _Entry] = {}
        self.topic_counts: dict[str, TransformCounts] = {}
        self.subscription_counts: dict[str, TransformCounts] = {}

    # ---------------------------------------------------------------- config

    async def check(self, kind: str, transforms: Sequence[pubsub_pb2.MessageTransform]) -> None:
        """The create/update check (``config.check_transforms``)."""
        await check_transforms(kind, transforms, self.limits)

    def udfs(self, kind: str, name: str) -> tuple[Udf, ...]:
        """The UDFs configured on a topic or subscription (disabled ones too), for views."""
        cache = self._topics if kind == "topic" else self._subscriptions
        self._chain(cache, name)
        entry = cache.get(name)
        return entry.udfs if entry is not None else ()

    def _extras(self, cache: dict[str, _Entry], name: str) -> tuple[bytes, type[Message]] | None:
        try:
            if cache is self._topics:
                return self.broker.topics.get(name).config.extras, pubsub_pb2.Topic
            return self.broker.subscriptions.get(name).config.extras, pubsub_pb2.Subscription
        except NotFound:
            return None

    def _chain(self, cache: dict[str, _Entry], name: str) -> Chain | None:
        found = self._extras(cache, name)
        entry = cache.get(name)
        if found is None:  # gone: its chain goes too
            if entry is not None:
                self._drop(cache, name)
            return None
        extras, message_type = found
        if entry is not None and entry.extras is extras:
            return entry.chain
        transforms = message_type.FromString(extras).message_transforms  # type: ignore[attr-defined]
        key = transforms_key(transforms)
        if entry is not None and entry.key == key:
            entry.extras = extras  # another field changed: the same chain
            return entry.chain
        if entry is not None:
            self._drop(cache, name)
        udfs = tuple(udfs_of(transforms))
        running = enabled(udfs)
        chain = Chain(running, self.limits) if running else None
        cache[name] = _Entry(extras, key, udfs, chain)
        return chain

    def _drop(self, cache: dict[str, _Entry], name: str) -> None:
        entry = cache.pop(name)
        if entry.chain is not None:
            entry.chain.close()

    def close(self) -> None:
        """Free every chain (the server is stopping)."""
        for cache in (self._topics, self._subscriptions):
            for name in list(cache):
                self._drop(cache, name)

    # ----------------------------------------------------------------- topics

    async def publish(self, request: pubsub_pb2.PublishRequest) -> StagedPublish:
        """The topic's transforms applied to ``request`` (the same request back when the
        topic has none or does not exist: the broker answers for that)."""
        chain = self._chain(self._topics, request.topic)
        if chain is None or not request.messages:
            return StagedPublish(request)
        outcomes = await chain.apply(
            [MessageIn(m.data, m.attributes, ordering_key=m.ordering_key) for m in request.messages]
        )
        counts = self.topic_counts.setdefault(request.topic, TransformCounts())
        failures = [(i, o) for i, o in enumerate(outcomes) if isinstance(o, Failed)]
        if failures:
            counts.failed += len(failures)
            index, first = failures[0]
            raise InvalidArgument(
                f"A message transform of topic {request.topic} failed for message {index} "
                f"of the publish request ({len(failures)} of {len(outcomes)} failed; "
                f"nothing was published): {first.reason}"
            )
        staged = StagedPublish(pubsub_pb2.PublishRequest(topic=request.topic))
        for index, (message, outcome) in enumerate(zip(request.messages, outcomes, strict=True)):
            if isinstance(outcome, Filtered):
                staged.filtered.append(index)
                continue
            assert isinstance(outcome, Transformed)
            staged.request.messages.add(
                data=outcome.data,
                attributes=outcome.attributes,
                ordering_key=message.ordering_key,
            )
        counts.filtered += len(staged.filtered)
        counts.transformed += len(staged.request.messages)
        return staged

    # ---------------------------------------------------------- subscriptions

    def active(self, subscription: str) -> bool:
        """Whether ``subscription`` has a transform to run (cheap: cached)."""
        return self._chain(self._subscriptions, subscription) is not None

    async def deliver(self, subscription: str, deliveries: list[Delivery]) -> list[Delivery]:
        """What of ``deliveries`` (leased from ``subscription``) leaves, transformed;
        filtered ones are acknowledged and failed ones nacked here."""
        if not deliveries:
            return deliveries
        chain = self._chain(self._subscriptions, subscription)
        if chain is None:
            return deliveries
        outcomes = await chain.apply(
            [
                MessageIn(
                    d.message.data,
                    d.message.attributes,
                    d.message.message_id,
                    d.message.publish_time,
                    d.message.ordering_key,
                )
                for d in deliveries
            ]
        )
        kept: list[Delivery] = []
        filtered: list[str] = []
        failed: list[tuple[str, str]] = []
        for delivery, outcome in zip(deliveries, outcomes, strict=True):
            if isinstance(outcome, Transformed):
                kept.append(_transformed(delivery, outcome))
            elif isinstance(outcome, Filtered):
                filtered.append(delivery.ack_id)
            else:
                failed.append((delivery.ack_id, outcome.reason))
        counts = self.subscription_counts.setdefault(subscription, TransformCounts())
        counts.transformed += len(kept)
        counts.filtered += len(filtered)
        counts.failed += len(failed)
        try:
            if filtered:
                self.broker.acks.acknowledge(subscription, filtered)
            if failed:
                self.broker.acks.modify_ack_deadline(subscription, [a for a, _ in failed], 0)
        except NotFound:  # deleted while the chain ran: nothing left to settle
            return []
        if failed:
            logger.warning(
                "message transform of %s failed for %d message(s), nacked for redelivery: %s",
                subscription,
                len(failed),
                failed[0][1],
            )
        return kept


def _transformed(delivery: Delivery, outcome: Transformed) -> Delivery:
    message = delivery.message
    size = (
        len(outcome.data)
        + sum(len(k.encode()) + len(v.encode()) for k, v in outcome.attributes.items())
        + len(message.ordering_key.encode())
    )
    changed = dataclasses.replace(
        message, data=outcome.data, attributes=dict(outcome.attributes), size=size
    )
    return dataclasses.replace(delivery, message=changed)
