"""The asyncio subscriber: StreamingPull with flow control, leases and exactly-once results."""

from eoclient.subscriber.ack_results import AckIdResults, AcknowledgeStatus, AckResult
from eoclient.subscriber.batch import MessageBatch
from eoclient.subscriber.client import SubscriberClient
from eoclient.subscriber.lease_groups import LeaseGroups
from eoclient.subscriber.leases import renewal_margin
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
    "AckIdResults",
    "AckResult",
    "AckRetrySettings",
    "AcknowledgeStatus",
    "FlowControl",
    "LeaseGroups",
    "LeaseSettings",
    "Message",
    "MessageBatch",
    "ShutdownBehavior",
    "ShutdownOptions",
    "StreamSettings",
    "StreamingSession",
    "SubscriberClient",
    "SubscriberStatistics",
    "renewal_margin",
]
