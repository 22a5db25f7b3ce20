"""Server-side flow control of the StreamingPull streams open on a subscription."""

from __future__ import annotations

from collections.abc import Sequence
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
        return self._room_with(self.outstanding_messages, self.outstanding_bytes)

    def _room_with(self, messages: int, size: int) -> bool:
        # A stream with nothing outstanding always gets one message, even one larger
        # than max_bytes: otherwise that message could never be delivered to it.
        if messages == 0:
            return True
        if 0 < self.max_messages <= messages:
            return False
        return not 0 < self.max_bytes <= size

    def message_room(self, want: int) -> int:
        """At most ``want``, and no more than ``max_messages`` lets out (once ``has_room``)."""
        if self.max_messages <= 0:
            return want
        return min(want, self.max_messages - self.outstanding_messages)

    def fitting(self, sizes: Sequence[int]) -> int:
        """How many of a run of messages of ``sizes`` go to the stream in turn, each while
        ``has_room`` (counting the run's earlier ones): what one-at-a-time delivery sends."""
        if self.max_messages <= 0 and self.max_bytes <= 0:
            return len(sizes)
        messages, size = self.outstanding_messages, self.outstanding_bytes
        for count, message_size in enumerate(sizes):
            if not self._room_with(messages, size):
                return count
            messages += 1
            size += message_size
        return len(sizes)


class OpenStreams:
    """The StreamingPull streams open on one subscription, each with its flow control.

    A lease counts against the flow control of the stream it was delivered on from its
    delivery to its end (ack, nack, expiry). A stream that closes leaves its leases valid
    until their deadlines — acks may still come on other streams or by unary calls — and
    they stop counting against any stream. O(1) an operation.
    """

    def __init__(self) -> None:
        self._flows: dict[int, StreamFlow] = {}

    def __len__(self) -> int:
        return len(self._flows)

    def open(self, flow: StreamFlow) -> None:
        self._flows[flow.stream_id] = flow

    def close(self, stream_id: int) -> None:
        self._flows.pop(stream_id, None)

    def get(self, stream_id: int) -> StreamFlow | None:
        return self._flows.get(stream_id)

    def all(self) -> list[StreamFlow]:
        return list(self._flows.values())

    def release(self, stream_id: int, size: int) -> None:
        """A lease of ``size`` bytes delivered on ``stream_id`` (0: none) ended."""
        if stream_id:
            flow = self._flows.get(stream_id)
            if flow is not None:
                flow.outstanding_messages -= 1
                flow.outstanding_bytes -= size

    def release_all(self) -> None:
        """Every lease ended at once (a seek): the streams stay open, with nothing out."""
        for flow in self._flows.values():
            flow.outstanding_messages = 0
            flow.outstanding_bytes = 0
