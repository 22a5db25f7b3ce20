"""Server-side flow control of one StreamingPull stream."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StreamFlow:
    """Server-side flow control of one StreamingPull stream
    (docs/protocol.md#server-side-flow-control)."""

    stream_id: int
    ack_deadline: int
    max_messages: int  # <= 0: unlimited
    max_bytes: int  # <= 0: unlimited
    outstanding_messages: int = 0
    outstanding_bytes: int = 0

    def has_room(self) -> bool:
        # A stream with nothing outstanding always gets one message, even one larger
        # than max_bytes: otherwise that message could never be delivered to it.
        if self.outstanding_messages == 0:
            return True
        if 0 < self.max_messages <= self.outstanding_messages:
            return False
        return not 0 < self.max_bytes <= self.outstanding_bytes
