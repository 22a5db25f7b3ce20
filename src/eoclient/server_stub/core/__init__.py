"""The broker core: pure, synchronous, clock injected; no asyncio and no protobuf inside.

Adapters (gRPC, REST) translate the wire into the domain types of ``model`` and call
``Broker``; everything the server decides is decided here.
"""

from eoclient.server_stub.core.broker import Broker
from eoclient.server_stub.core.model import (
    AckReply,
    DeadLetterPolicy,
    Delivery,
    ExpirationPolicy,
    NewMessage,
    Page,
    RetryPolicy,
    SnapshotView,
    StoredMessage,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
    TopicView,
)

__all__ = [
    "AckReply",
    "Broker",
    "DeadLetterPolicy",
    "Delivery",
    "ExpirationPolicy",
    "NewMessage",
    "Page",
    "RetryPolicy",
    "SnapshotView",
    "StoredMessage",
    "SubscriptionConfig",
    "SubscriptionView",
    "TopicConfig",
    "TopicView",
]
