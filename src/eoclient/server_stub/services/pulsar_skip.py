"""Pulsar's skip by message ids, as the services answer it
(docs/protocol.md#skip-by-message-id).

The REST door serves Pulsar's admin path (``doors/rest/pulsar_alias.py``: the path, the
three body formats, Pulsar's error bodies); what the names mean and which of them exist is
decided here. The tenant is the project and the namespace must be ``default``, so
``persistent://my-project/default/orders`` is ``projects/my-project/topics/orders`` and its
subscription ``s`` is ``projects/my-project/subscriptions/s``, which must be attached to
that topic. The caller's grant is checked before anything is looked up (whether a name
exists is not told to a caller who may not see it); then the skip is the ``SkipMessages``
RPC of ``broker_policies.py``, run through ``Services.call`` like every other call.

A name that does not resolve is ``NotFound`` with the text Pulsar's admin API gives
("Topic persistent://t/n/x not found", "Subscription s not found for topic ...").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from eoclient._proto import broker_policies_pb2 as pb
from eoclient.errors import NotFound, RpcError
from eoclient.server_stub.access.tokens import Grant
from eoclient.server_stub.core import Broker

# The one namespace of a project: Pulsar's default namespace name.
NAMESPACE = "default"

Call = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class PulsarSubscription:
    """A subscription as Pulsar's admin path names it."""

    tenant: str
    namespace: str
    topic: str
    subscription: str

    @property
    def pulsar_topic(self) -> str:
        return f"persistent://{self.tenant}/{self.namespace}/{self.topic}"


class PulsarSkip:
    """Skips by message id for Pulsar's admin path, over one broker."""

    def __init__(
        self, broker: Broker, call: Call, authorize: Callable[[Grant | None, Message], None]
    ) -> None:
        self._broker = broker
        self._call = call
        self._authorize = authorize

    async def skip(
        self, target: PulsarSubscription, message_ids: Sequence[str], grant: Grant | None
    ) -> None:
        """Skip ``message_ids`` on ``target`` for the caller ``grant`` (authenticated by the
        door); ``RpcError`` (``NotFound`` with Pulsar's texts) if it cannot."""
        if target.namespace != NAMESPACE:
            raise NotFound(
                f"Namespace {target.tenant}/{target.namespace} not found: eoclient maps "
                f"project {target.tenant} to the namespace {target.tenant}/{NAMESPACE}."
            )
        topic = f"projects/{target.tenant}/topics/{target.topic}"
        subscription = f"projects/{target.tenant}/subscriptions/{target.subscription}"
        request = pb.SkipMessagesRequest(subscription=subscription, message_ids=message_ids)
        self._authorize(grant, request)  # before anything is looked up (existence leaks)
        try:
            self._broker.topics.get(topic)
        except RpcError:  # NOT_FOUND, or a name that cannot exist
            raise NotFound(f"Topic {target.pulsar_topic} not found") from None
        try:
            attached = self._broker.subscriptions.get(subscription).config.topic == topic
        except RpcError:
            attached = False
        if not attached:
            raise NotFound(
                f"Subscription {target.subscription} not found for topic {target.pulsar_topic}"
            )
        if message_ids:
            await self._call("SkipMessages", request, grant=grant)
