"""The asyncio publisher: batching, ordering keys with pause/resume, flow control, retries."""

from eoclient.publisher.client import PublisherClient, PublisherState, PublisherStatistics
from eoclient.publisher.settings import (
    BatchSettings,
    LimitExceededBehavior,
    PublishFlowControl,
    PublishRetrySettings,
)

__all__ = [
    "BatchSettings",
    "LimitExceededBehavior",
    "PublishFlowControl",
    "PublishRetrySettings",
    "PublisherClient",
    "PublisherState",
    "PublisherStatistics",
]
