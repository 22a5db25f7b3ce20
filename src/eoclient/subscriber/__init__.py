"""The asyncio subscriber: StreamingPull with flow control, leases and exactly-once results."""

from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.batch import MessageBatch
from eoclient.subscriber.client import SubscriberClient
from eoclient.subscriber.message import Message
from eoclient.subscriber.session import StreamingSession, SubscriberStatistics
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)

__all__ = [
    "AckResult",
    "AckRetrySettings",
    "AcknowledgeStatus",
    "FlowControl",
    "LeaseSettings",
    "Message",
    "MessageBatch",
    "ShutdownBehavior",
    "ShutdownOptions",
    "StreamSettings",
    "StreamingSession",
    "SubscriberClient",
    "SubscriberStatistics",
]
