"""The dispatch core of a subscription session: synchronous, no I/O, time passed in.

What happens to a message between the stream and the application, and back:

* admission: lease table → (exactly-once: the receipt modack's result) → ordering gate
  (one message out per key) → flow gate (at most max_messages / max_bytes out) →
  ``ready``, the queue the application reads;
* flow-control release: a settled message frees room; held messages move to ``ready``;
* settlement: an ack / nack / modack becomes an :class:`~eoclient.subscriber.acker.AckRequest`
  queued in the ledger (the ``Acker``), whose sending the shell performs;
* leases: due renewals become modacks, leases past ``max_lease`` are released;
* shutdown: what was never handed out is nacked, then what the application still holds.

The session (``session.py``) is the shell: it feeds responses in, takes messages out,
and sends what the ledger holds. Readiness is signalled through ``notify_ready``, called
synchronously whenever ``ready`` gains a message, so the shell can wake its reader.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.acker import Acker, AckRequest, Operation
from eoclient.subscriber.flow_control import FlowGate
from eoclient.subscriber.histogram import LatencyHistogram, bounded_deadline
from eoclient.subscriber.leases import LeaseTable
from eoclient.subscriber.message import Message, _AckSink, message_from_wire
from eoclient.subscriber.ordering import OrderingGate
from eoclient.subscriber.settings import FlowControl, LeaseSettings, StreamSettings

logger = logging.getLogger("eoclient.subscriber")

__all__ = ["DispatchStatistics", "Dispatcher"]


@dataclass(frozen=True, slots=True)
class DispatchStatistics:
    outstanding_messages: int
    outstanding_bytes: int
    held_messages: int
    leased_messages: int
    received: int
    expired: int


class Dispatcher:
    """Messages of one session from receipt to settlement (see the module docstring)."""

    def __init__(
        self,
        acker: Acker,
        sink: _AckSink,
        *,
        flow_control: FlowControl,
        lease: LeaseSettings,
        stream: StreamSettings,
        notify_ready: Callable[[], None] = lambda: None,
    ) -> None:
        self.acker = acker
        self.sink = sink  # what received messages settle through (the session)
        self.lease_settings = lease
        self.stream_settings = stream
        self.notify_ready = notify_ready
        self.leases = LeaseTable(max_lease=lease.max_lease)
        self.flow = FlowGate(flow_control)
        self.ordering: OrderingGate[Message] = OrderingGate()
        self.histogram = LatencyHistogram()
        self.ready: deque[Message] = deque()
        self.held: dict[str, Message] = {}  # ack id → message waiting in the flow gate
        self.out: dict[str, Message] = {}  # ack id → message handed to the application
        # Exactly-once: per ordering key, messages waiting for their receipt modack's
        # result, in arrival order, and the results that came in out of that order.
        self._awaiting_receipt: dict[str, deque[Message]] = {}
        self._receipt_results: dict[str, AckResult] = {}
        self.lease_check_at = math.inf  # see due()
        self.received = 0
        self.stopped = False  # shutdown: nothing more is admitted
        self.failure = ""  # set once the session failed: settlements resolve OTHER

    # ------------------------------------------------------------ deadlines

    def stream_ack_deadline(self) -> float:
        # The stream deadline covers messages until their receipt modack; like the
        # official clients use 60 s, or max_extension when set (client-anchors §1.3).
        if self.lease_settings.max_extension:
            return max(10.0, min(600.0, self.lease_settings.max_extension))
        return self.stream_settings.stream_ack_deadline

    def lease_deadline(self) -> float:
        return bounded_deadline(
            self.histogram.percentile(99),
            min_extension=self.lease_settings.min_extension,
            max_extension=self.lease_settings.max_extension,
            exactly_once=self.acker.exactly_once,
        )

    def _lease_check_soon(self, now: float, lease_seconds: float) -> None:
        # A lease of d seconds is renewed at least d/2 after it starts (leases.py:
        # renewal_margin is at most half the lease), so now + d/2 is never late.
        self.lease_check_at = min(self.lease_check_at, now + lease_seconds / 2)

    # ------------------------------------------------------------- receiving

    def on_response(
        self, response: pubsub_pb2.StreamingPullResponse, now: float
    ) -> list[AckRequest]:
        """Take in one StreamingPull response; returns requests to resend by unary call."""
        if response.HasField("subscription_properties"):
            self.acker.exactly_once = response.subscription_properties.exactly_once_delivery_enabled
        retry: list[AckRequest] = []
        if response.HasField("acknowledge_confirmation") or response.HasField(
            "modify_ack_deadline_confirmation"
        ):
            retry = self.acker.on_confirmation(response)
        if response.received_messages:
            self._receive(response, now)
        return retry

    def _receive(self, response: pubsub_pb2.StreamingPullResponse, now: float) -> None:
        if self.stopped:
            # Shutting down: what the server had in flight goes back at once.
            for received in response.received_messages:
                self.acker.submit(received.ack_id, Operation.NACK)
            return
        stream_deadline = self.stream_ack_deadline()
        deadline = int(self.lease_deadline())
        arrived: list[Message] = []
        for received in response.received_messages:
            if received.ack_id in self.leases:
                continue  # a duplicate delivery of a lease we hold
            message = message_from_wire(received, self.sink, now)
            self.leases.add(
                received.ack_id,
                message.size,
                now,
                deadline=stream_deadline,
                ordering_key=message.ordering_key,
            )
            arrived.append(message)
        if not arrived:
            return
        self.received += len(arrived)
        receipts = [self.acker.submit(m.ack_id, Operation.MODACK, deadline) for m in arrived]
        self.leases.extended([m.ack_id for m in arrived], deadline, now)
        self._lease_check_soon(now, min(deadline, stream_deadline))
        if self.acker.exactly_once:
            # Hand out only messages whose receipt modack succeeded: an invalid id
            # means the lease is already lost (client-anchors §1.5).
            for message in arrived:
                if message.ordering_key:
                    self._awaiting_receipt.setdefault(message.ordering_key, deque()).append(message)
            pending = _ReceiptBatch(arrived, receipts, self._admit_after_receipt)
            for receipt in receipts:
                receipt.callback = pending.one_done
        else:
            for message in arrived:
                self._admit(message)

    def _admit_after_receipt(self, messages: list[Message], results: list[AckResult]) -> None:
        for message, result in zip(messages, results, strict=True):
            if not message.ordering_key:
                self._after_receipt(message, result)
                continue
            # A key's messages go on in arrival order, whichever receipt resolved
            # first: a later message of the key (another response, whose receipt
            # succeeded at once) must not overtake one whose receipt is being retried.
            self._receipt_results[message.ack_id] = result
            queue = self._awaiting_receipt.get(message.ordering_key)
            while queue and queue[0].ack_id in self._receipt_results:
                head = queue.popleft()
                self._after_receipt(head, self._receipt_results.pop(head.ack_id))
            if not queue:
                self._awaiting_receipt.pop(message.ordering_key, None)

    def _after_receipt(self, message: Message, result: AckResult) -> None:
        if self.stopped:
            self.leases.remove(message.ack_id)
            self.acker.submit(message.ack_id, Operation.NACK)
        elif result.status is AcknowledgeStatus.SUCCESS:
            self._admit(message)
        else:
            self.leases.remove(message.ack_id)

    def _admit(self, message: Message) -> None:
        if self.ordering.offer(message.ordering_key, message):
            self._offer_flow(message)

    def _offer_flow(self, message: Message) -> None:
        if self.flow.offer(message.ack_id, message.size):
            self._hand_out(message)
        else:
            self.held[message.ack_id] = message

    def _hand_out(self, message: Message) -> None:
        self.ready.append(message)
        self.notify_ready()

    def _unready(self, ack_id: str) -> Message | None:
        """Remove a message from ``ready`` (rare: released before the application took it)."""
        for message in self.ready:
            if message.ack_id == ack_id:
                self.ready.remove(message)
                return message
        return None

    def take(self) -> Message | None:
        """The next message for the application, now counted as out; None if none is ready."""
        if not self.ready:
            return None
        message = self.ready.popleft()
        self.out[message.ack_id] = message
        return message

    # -------------------------------------------------------------- settling

    def settle(
        self, message: Message, operation: Operation, seconds: int, now: float
    ) -> AckRequest:
        """An ack / nack of ``message``: free its room and lease, queue the request."""
        if operation is Operation.ACK:
            self.histogram.record(now - message.received_at)
        was_out = self.out.pop(message.ack_id, None) is not None
        self._forget(message)
        if operation is Operation.NACK and message.ordering_key:
            # The server redelivers the rest of the key in order: drop our copies.
            for stale in self.ordering.discard_key(message.ordering_key):
                self._forget(stale)
        if was_out and message.ordering_key:
            # Only the key's message out moves its key on: one released past max_lease
            # and settled late must not release the key's next message a second time.
            released = self.ordering.done(message.ordering_key)
            if released is not None:
                self._offer_flow(released)
        if self.failure:
            # Nothing will send it: the session has failed.
            return unsent(message.ack_id, operation, f"the subscriber failed: {self.failure}")
        return self.acker.submit(message.ack_id, operation, seconds)

    def extend(self, message: Message, seconds: int, now: float) -> AckRequest:
        self.leases.extended([message.ack_id], seconds, now)
        self._lease_check_soon(now, seconds)
        return self.acker.submit(message.ack_id, Operation.MODACK, seconds)

    def _forget(self, message: Message) -> None:
        """Stop leasing and counting a message (acked, nacked, dropped)."""
        self.leases.remove(message.ack_id)
        self.held.pop(message.ack_id, None)
        self._release(message.ack_id)

    def _release(self, ack_id: str) -> None:
        for admitted in self.flow.release(ack_id):
            held = self.held.pop(admitted, None)
            if held is not None:
                self._hand_out(held)

    # ---------------------------------------------------------------- leases

    def due(self, now: float) -> None:
        """Queue the lease renewals due by ``now``; release leases past ``max_lease``.

        ``LeaseTable.due`` and ``next_wakeup`` scan the whole table; the sender wakes for
        every batch of acks, so they are asked only once ``lease_check_at`` has come. That
        time is a lower bound of the next renewal: new leases and shorter modacks pull it
        earlier (``_lease_check_soon``).
        """
        if now < self.lease_check_at:
            return
        actions = self.leases.due(now, self.lease_deadline())
        wakeup = self.leases.next_wakeup(now)
        self.lease_check_at = math.inf if wakeup is None else wakeup
        for released in actions.released:
            message = (
                self.out.pop(released.ack_id, None)
                or self.held.pop(released.ack_id, None)
                or self._unready(released.ack_id)
            )
            self._release(released.ack_id)
            if released.ordering_key:
                # The server redelivers it and the rest of its key, in order, once the
                # lease runs out: the parked copies are stale, as after a nack.
                for stale in self.ordering.discard_key(released.ordering_key):
                    self._forget(stale)
                if message is not None:  # it was the key's message out (or about to be)
                    self.ordering.done(released.ordering_key)
            if message is not None:
                logger.info("message %s held past max_lease; released", message.message_id)
        for ack_id in actions.extend:
            self.acker.submit(ack_id, Operation.MODACK, actions.deadline_seconds)

    # -------------------------------------------------------------- shutdown

    def stop(self) -> None:
        """Shutdown begins: nack every message not handed out; admit nothing more."""
        self.stopped = True
        never_out = list(self.ready) + list(self.held.values()) + self.ordering.drain()
        for message in never_out:
            self._forget(message)
            self.acker.submit(message.ack_id, Operation.NACK)
        # Cleared after the loop: forgetting one message frees room that moves a held
        # one to ``ready`` (it is nacked above all the same, and must not be handed out).
        self.ready.clear()
        self.held.clear()

    def nack_outstanding(self) -> None:
        """Shutdown: nack what the application still holds; its later acks report OTHER."""
        for message in list(self.out.values()):
            message._settled_as = Operation.NACK
            self.acker.submit(message.ack_id, Operation.NACK)
            message._settlement = unsent(
                message.ack_id, Operation.NACK, "shutdown initiated, already nacked"
            )
            self._forget(message)
        self.out.clear()

    def statistics(self) -> DispatchStatistics:
        flow = self.flow.statistics()
        return DispatchStatistics(
            outstanding_messages=flow.outstanding_messages,
            outstanding_bytes=flow.outstanding_bytes,
            held_messages=len(self.held) + self.ordering.statistics().parked_messages,
            leased_messages=self.leases.statistics().leased_messages,
            received=self.received,
            expired=self.leases.statistics().released_for_max_lease,
        )


def unsent(ack_id: str, operation: Operation, info: str) -> AckRequest:
    """A request that will not be sent, resolved OTHER with ``info``."""
    return AckRequest.resolved(ack_id, operation, AckResult(AcknowledgeStatus.OTHER, info))


class _ReceiptBatch:
    """The receipt modacks of one response: when all have results, admit the messages.

    Plain callbacks rather than a gathered future per modack: one fewer future,
    callback and loop iteration per message on the exactly-once hot path.
    """

    __slots__ = ("_done", "_messages", "_remaining", "_requests")

    def __init__(
        self,
        messages: list[Message],
        requests: list[AckRequest],
        done: Callable[[list[Message], list[AckResult]], None],
    ) -> None:
        self._messages = messages
        self._requests = requests
        self._remaining = len(requests)
        self._done = done

    def one_done(self, _: AckRequest) -> None:
        self._remaining -= 1
        if self._remaining == 0:
            results: list[AckResult] = []
            for request in self._requests:
                assert request.result is not None  # called only once a result is set
                results.append(request.result)
            self._done(self._messages, results)
