"""Push delivery (issue 14.2): ``flow`` (pure window, backoff and key sequencing),
``payload`` (push configs and the HTTP requests), ``dispatcher`` (the async shell)."""

from eoclient.server_stub.push.dispatcher import PushDispatcher, PushMetrics
from eoclient.server_stub.push.flow import PushFlow, PushSettings

__all__ = ["PushDispatcher", "PushFlow", "PushMetrics", "PushSettings"]
