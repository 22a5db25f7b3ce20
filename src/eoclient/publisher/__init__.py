"""The asyncio publisher: batching, ordering keys with pause/resume, flow control, retries."""

from eoclient.publisher.client import PublisherClient
from eoclient.publisher.settings import (
    BatchSettings,
    LimitExceededBehavior,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.publisher.state import PublisherState, PublisherStatistics

__all__ = [
    "BatchSettings",
    "LimitExceededBehavior",
    "PublishFlowControl",
    "PublishRetrySettings",
    "PublisherClient",
    "PublisherState",
    "PublisherStatistics",
]
