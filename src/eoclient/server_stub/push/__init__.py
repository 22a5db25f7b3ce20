"""Push delivery (issue 14.2): ``flow`` (pure window, backoff and key sequencing),
``payload`` (push configs and the HTTP requests), ``dispatcher`` (the async shell)."""

from eoclient.server_stub.push.flow import PushFlow, PushSettings
from eoclient.server_stub.push.sender import PushDispatcher, PushMetrics

__all__ = ["PushDispatcher", "PushFlow", "PushMetrics", "PushSettings"]
