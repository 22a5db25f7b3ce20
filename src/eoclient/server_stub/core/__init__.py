"""The broker core: pure, synchronous, clock injected; no asyncio and no protobuf inside.

The services (``server_stub/services``) translate the wire into the domain types of
``model`` and call the broker's rooms (``broker.topics``, ``broker.acks``, ...);
everything the server decides is decided here.
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
