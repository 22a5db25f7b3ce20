"""eoclient: asyncio-native Pub/Sub (google.pubsub.v1) SDK and reference server."""

from eoclient import errors

__all__ = ["errors"]
__version__ = "0.1.0"
