"""Push delivery: ``flow`` (pure window, backoff and key sequencing), ``payload`` (the
HTTP requests a push sends), ``sender`` (the async shell that leases and POSTs)."""

from eoclient.server_stub.push.flow import PushFlow, PushSettings
from eoclient.server_stub.push.sender import PushMetrics, PushSender

__all__ = ["PushFlow", "PushMetrics", "PushSender", "PushSettings"]
