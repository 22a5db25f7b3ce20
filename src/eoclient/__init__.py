"""eoclient: asyncio-native Pub/Sub (google.pubsub.v1) SDK and reference server.

::

    async with eoclient.SubscriberClient() as client:
        async with client.subscribe(subscription) as stream:
            async for message in stream:
                status = await message.ack_with_response()

``pip install eoclient`` is this SDK alone, and importing it imports nothing else of
eoclient's. The reference server lives in :mod:`eoclient.server_stub` (``eoclient serve``;
``pip install 'eoclient[server]'``), the command in :mod:`eoclient.cli` (``eoclient[cli]``),
the PySpark connector in :mod:`eoclient.spark` (``eoclient[spark]``). Within the SDK,
TLS with credentials (the real service) needs ``eoclient[gcp]`` and OpenTelemetry tracing
``eoclient[otel]``.
"""

from eoclient import errors
from eoclient._endpoint import Endpoint
from eoclient.admin import AdminClient
from eoclient.publisher import (
    BatchSettings,
    LimitExceededBehavior,
    PublisherClient,
    PublisherState,
    PublisherStatistics,
    PublishFlowControl,
    PublishRetrySettings,
)
from eoclient.subscriber import (
    AckIdResults,
    AcknowledgeStatus,
    AckResult,
    AckRetrySettings,
    FlowControl,
    LeaseGroups,
    LeaseSettings,
    Message,
    MessageBatch,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
    SubscriberClient,
    SubscriberStatistics,
)

__all__ = [
    "AckIdResults",
    "AckResult",
    "AckRetrySettings",
    "AcknowledgeStatus",
    "AdminClient",
    "BatchSettings",
    "Endpoint",
    "FlowControl",
    "LeaseGroups",
    "LeaseSettings",
    "LimitExceededBehavior",
    "Message",
    "MessageBatch",
    "PublishFlowControl",
    "PublishRetrySettings",
    "PublisherClient",
    "PublisherState",
    "PublisherStatistics",
    "ShutdownBehavior",
    "ShutdownOptions",
    "StreamSettings",
    "SubscriberClient",
    "SubscriberStatistics",
    "errors",
]
__version__ = "0.1.0"
