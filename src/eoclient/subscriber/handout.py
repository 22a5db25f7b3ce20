"""Handing messages out under flow control: held, ready, out. Synchronous, no I/O.

The last step of admission and the first of settlement, for one session
(``dispatch.py`` decides when; docs/protocol.md#subscriber-flow-control). A message
admitted past its receipt and its ordering key is offered to the flow gate
(:class:`~eoclient.subscriber.flow_control.FlowGate`): with room, it joins ``ready`` (the
queue the application reads); without, it is *held* until a settlement frees room. Taken
by the application, it is *out* until settled. Every message is in at most one of the
three places, and this room is the only one that moves it between them — so the flow
gate's count and the queues cannot disagree.

Readiness is signalled through ``notify_ready``, called synchronously whenever ``ready``
gains messages (once per batch of them, not per message), so the shell can wake its reader.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from eoclient.subscriber.flow_control import FlowGate
from eoclient.subscriber.message import Message
from eoclient.subscriber.settings import FlowControl

logger = logging.getLogger("eoclient.subscriber")

__all__ = ["HandOut"]


class HandOut:
    """The flow gate and the three places around it: ``held`` (waiting for room),
    ``ready`` (waiting for the application) and ``out`` (with the application)."""

    __slots__ = ("flow", "held", "notify_ready", "out", "ready")

    def __init__(self, flow_control: FlowControl, notify_ready: Callable[[], None]) -> None:
        self.flow = FlowGate(flow_control)
        self.notify_ready = notify_ready
        self.ready: deque[Message] = deque()
        self.held: dict[str, Message] = {}  # ack id → message waiting in the flow gate
        self.out: dict[str, Message] = {}  # ack id → message handed to the application

    # ------------------------------------------------------------- admitting

    def offer(self, message: Message) -> None:
        """Hand ``message`` out if the flow gate has room, else hold it."""
        if self.flow.offer(message.ack_id, message.size):
            self._hand_out(message)
        else:
            if not self.held:
                self._log_hold(1)  # once as holding starts, not for every message held
            self.held[message.ack_id] = message

    def offer_many(self, messages: list[Message]) -> None:
        """:meth:`offer` for messages without an ordering key, waking the reader once: the
        flow gate admits a prefix and holds the rest, in order."""
        admitted = self.flow.offer_many(messages)
        if admitted:
            self.ready.extend(messages[:admitted] if admitted < len(messages) else messages)
            self.notify_ready()
        if admitted < len(messages):
            self._log_hold(len(messages) - admitted)
            held = self.held
            for message in messages[admitted:]:
                held[message.ack_id] = message

    def _log_hold(self, count: int) -> None:
        if logger.isEnabledFor(logging.DEBUG):
            flow = self.flow.statistics()
            limits = self.flow.limits
            logger.debug(
                "flow control holds %d more messages (%d held): %d messages / %d bytes "
                "outstanding of at most %s / %s; they wait for settlements",
                count,
                len(self.held) + count,
                flow.outstanding_messages,
                flow.outstanding_bytes,
                limits.max_messages or "unlimited",
                limits.max_bytes or "unlimited",
            )

    def _hand_out(self, message: Message) -> None:
        self.ready.append(message)
        self.notify_ready()

    # ---------------------------------------------------------------- taking

    def take(self) -> Message | None:
        """The next message for the application, now counted as out; None if none is ready."""
        if not self.ready:
            return None
        message = self.ready.popleft()
        self.out[message.ack_id] = message
        return message

    def take_up_to(self, count: int) -> list[Message]:
        """Up to ``count`` ready messages for the application (none is waited for)."""
        ready, out = self.ready, self.out
        taken = [ready.popleft() for _ in range(min(count, len(ready)))]
        for message in taken:
            out[message.ack_id] = message
        return taken

    # ------------------------------------------------------------- releasing

    def settled(self, ack_id: str) -> bool:
        """``ack_id`` was acked or nacked: it frees its room (a held message may move to
        ``ready``). Whether it was out (the application's, not one released earlier)."""
        was_out = self.out.pop(ack_id, None) is not None
        if self.held:
            self.held.pop(ack_id, None)
        admitted = self.flow.release(ack_id)
        if admitted:
            self._hand_out_held(admitted)
        return was_out

    def settled_many(self, ack_ids: list[str]) -> None:
        """:meth:`settled` for messages settled together (no ordering key among them)."""
        out, held = self.out, self.held
        for ack_id in ack_ids:
            out.pop(ack_id, None)
        if held:
            for ack_id in ack_ids:
                held.pop(ack_id, None)
        for key in self.flow.release_many(ack_ids):
            waiting = held.pop(key, None)
            if waiting is not None:
                self._hand_out(waiting)

    def forget(self, ack_id: str) -> None:
        """Stop counting a message never handed out or dropped (not in ``out``)."""
        self.held.pop(ack_id, None)
        self.release(ack_id)

    def withdraw(self, ack_id: str) -> Message | None:
        """Take a message back from wherever it is (its lease ran out); frees its room."""
        message = self.out.pop(ack_id, None) or self.held.pop(ack_id, None) or self._unready(ack_id)
        self.release(ack_id)
        return message

    def release(self, ack_id: str) -> None:
        admitted = self.flow.release(ack_id)
        if admitted:
            self._hand_out_held(admitted)

    def _hand_out_held(self, admitted: list[str]) -> None:
        for key in admitted:
            held = self.held.pop(key, None)
            if held is not None:
                self._hand_out(held)

    def _unready(self, ack_id: str) -> Message | None:
        """Remove a message from ``ready`` (rare: released before the application took it)."""
        for message in self.ready:
            if message.ack_id == ack_id:
                self.ready.remove(message)
                return message
        return None

    # -------------------------------------------------------------- shutdown

    def waiting(self) -> list[Message]:
        """The messages not handed to the application: ready, then held."""
        return list(self.ready) + list(self.held.values())

    def clear_waiting(self) -> None:
        """Empty ``ready`` and ``held`` (shutdown, once they are nacked)."""
        self.ready.clear()
        self.held.clear()

    def take_out(self) -> list[Message]:
        """Every message the application holds, no longer counted as out."""
        outstanding = list(self.out.values())
        self.out.clear()
        return outstanding
