"""The dispatch core of a subscription session: synchronous, no I/O, time passed in.

What happens to a message between the stream and the application, and back:

* admission: lease table → (exactly-once: the receipt modack's result, ``receipts.py``)
  → ordering gate (one message out per key) → flow gate (at most max_messages /
  max_bytes out) → ``ready``, the queue the application reads (``handout.py``);
* flow-control release: a settled message frees room; held messages move to ``ready``;
* settlement: an ack / nack / modack becomes a position in the ack ledger
  (:class:`~eoclient.subscriber.ledger.AckLedger`), whose sending the shell performs; a
  response's receipt modacks, and a batch settled together, are one ledger record each;
* leases: due renewals become modacks, leases past ``max_lease`` are released;
* shutdown: what was never handed out is nacked, then what the application still holds.

The :class:`Dispatcher` holds the order of those steps and the rules that span them (a
nack or an expired lease drops its key's parked copies; only the key's message out moves
the key on; nothing is admitted after ``stop``). The places a message waits are rooms of
their own, each with its invariant: :class:`~eoclient.subscriber.handout.HandOut` (held,
ready, out, and the flow gate's count of them) and
:class:`~eoclient.subscriber.receipts.ReceiptGate` (messages waiting for their receipt,
released per key in arrival order).

The session (``session.py``) is the shell: it feeds responses in, takes messages out,
and its sender sends what the ledger holds. Readiness is signalled through
``notify_ready``, called synchronously whenever ``ready`` gains messages, so the shell can
wake its reader. A receipt record's results come back through its ``on_resolved``
callback, which the shell runs when it hands the ledger's results out.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_records import Operation, Position, settled_record
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.handout import HandOut
from eoclient.subscriber.histogram import LatencyHistogram, bounded_deadline
from eoclient.subscriber.leases import LeaseTable
from eoclient.subscriber.ledger import AckLedger
from eoclient.subscriber.message import AckSink, Message
from eoclient.subscriber.ordering import OrderingGate
from eoclient.subscriber.receipts import ReceiptGate
from eoclient.subscriber.settings import FlowControl, LeaseSettings, StreamSettings

logger = logging.getLogger("eoclient.subscriber")

SUCCESS_RESULT = AckResult(AcknowledgeStatus.SUCCESS)

__all__ = ["DispatchStatistics", "Dispatcher", "MessageObserver"]


class MessageObserver(Protocol):
    """What the core tells beyond settlements (the session's tracing, ``spans.py``):
    messages as they arrive, and a message let go without being settled."""

    def received(self, messages: Sequence[Message], exactly_once: bool) -> None:
        """``messages`` arrived and are leased (before their receipt modack is entered)."""
        ...

    def released(self, message: Message, result: str) -> None:
        """``message`` is let go unsettled: ``"expired"`` (held past ``max_lease``) or
        ``"dropped"`` (a parked copy the server redelivers after its key's nack)."""
        ...


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
        ledger: AckLedger,
        sink: AckSink,
        *,
        flow_control: FlowControl,
        lease: LeaseSettings,
        stream: StreamSettings,
        notify_ready: Callable[[], None] = lambda: None,
        observer: MessageObserver | None = None,
    ) -> None:
        self.ledger = ledger
        self.sink = sink  # what received messages settle through (the session)
        self.observer = observer  # None unless tracing: tested once per response
        self.lease_settings = lease
        self.stream_settings = stream
        self.leases = LeaseTable(max_lease=lease.max_lease)
        self.handout = HandOut(flow_control, notify_ready)
        # The application's reads go straight to the hand-out: one call a message, not a
        # call that makes another (``__anext__`` takes every message through here).
        self.take: Callable[[], Message | None] = self.handout.take
        self.take_up_to: Callable[[int], list[Message]] = self.handout.take_up_to
        self._settled = self.handout.settled  # once per settled message: bound here
        self.ordering: OrderingGate[Message] = OrderingGate()
        self.receipts = ReceiptGate(
            all_succeeded=self._receipts_succeeded, after_receipt=self._after_receipt
        )
        self.histogram = LatencyHistogram()
        self.lease_check_at = math.inf  # see due()
        self.received = 0
        self.stopped = False  # shutdown: nothing more is admitted
        self.failure = ""  # set once the session failed (fail()): settlements resolve OTHER

    # Where the messages are (``handout.py``): for the shell's logs and the tests.
    @property
    def ready(self) -> deque[Message]:
        return self.handout.ready

    @property
    def held(self) -> dict[str, Message]:
        return self.handout.held

    @property
    def out(self) -> dict[str, Message]:
        return self.handout.out

    def fail(self, reason: str) -> None:
        """The session has failed: from now on settlements resolve OTHER with ``reason``
        (nothing will send them)."""
        self.failure = reason

    # ------------------------------------------------------------ deadlines

    def stream_ack_deadline(self) -> float:
        # The stream deadline covers messages until their receipt modack; like the
        # official clients use 60 s, or max_extension when set
        # (docs/protocol.md#initial-streamingpull-request).
        if self.lease_settings.max_extension:
            return max(10.0, min(600.0, self.lease_settings.max_extension))
        return self.stream_settings.stream_ack_deadline

    def lease_deadline(self) -> float:
        return bounded_deadline(
            self.histogram.percentile(99),
            min_extension=self.lease_settings.min_extension,
            max_extension=self.lease_settings.max_extension,
            exactly_once=self.ledger.exactly_once,
        )

    def _lease_check_soon(self, now: float, lease_seconds: float) -> None:
        # A lease of d seconds is renewed at least d/2 after it starts (leases.py:
        # renewal_margin is at most half the lease), so now + d/2 is never late.
        self.lease_check_at = min(self.lease_check_at, now + lease_seconds / 2)

    # ------------------------------------------------------------- receiving

    def on_response(self, response: pubsub_pb2.StreamingPullResponse, now: float) -> None:
        """Take in one StreamingPull response's properties and deliveries (its
        confirmations are the ledger's: the shell hands them there)."""
        if response.HasField("subscription_properties"):
            self.ledger.set_exactly_once(
                response.subscription_properties.exactly_once_delivery_enabled
            )
        if response.received_messages:
            self.receive(response.received_messages, now)

    def receive(self, deliveries: Iterable[pubsub_pb2.ReceivedMessage], now: float) -> None:
        """Deliveries of one response: the one place a received message enters the core."""
        ledger = self.ledger
        if self.stopped:
            # Shutting down: what the server had in flight goes back at once.
            ledger.submit_many([d.ack_id for d in deliveries], Operation.NACK)
            return
        sink = self.sink
        deadline = int(self.lease_deadline())
        # The receipt modack goes out at once: each lease runs from now for its deadline.
        # A delivery of an ack id already leased (a duplicate) is dropped here.
        arrived = self.leases.add_many(
            [Message(received, sink, now) for received in deliveries], now, deadline=deadline
        )
        if not arrived:
            return
        self.received += len(arrived)
        if self.observer is not None:
            self.observer.received(arrived, ledger.exactly_once)
        receipts = ledger.submit_many([m.ack_id for m in arrived], Operation.MODACK, deadline)
        self._lease_check_soon(now, min(deadline, self.stream_ack_deadline()))
        if not ledger.exactly_once:
            self._admit_all(arrived)
            return
        # Hand out only messages whose receipt modack succeeded: an invalid id means the
        # lease is already lost (docs/protocol.md#receipt-modacks; ``receipts.py``).
        self.receipts.expect(arrived, receipts)

    def _receipts_succeeded(self, messages: list[Message]) -> None:
        if self.stopped:
            for message in messages:
                self._after_receipt(message, SUCCESS_RESULT)
            return
        self._admit_all(messages)

    def _after_receipt(self, message: Message, result: AckResult) -> None:
        if self.stopped:
            self.leases.remove(message.ack_id)
            self.ledger.submit(message.ack_id, Operation.NACK)
        elif result.status is AcknowledgeStatus.SUCCESS:
            self._admit(message)
        else:
            logger.debug(
                "receipt of message %s refused (%s%s): its lease is lost, it is not handed "
                "out and comes again",
                message.message_id,
                result.status.name,
                f": {result.info}" if result.info else "",
            )
            self.leases.remove(message.ack_id)

    def _admit(self, message: Message) -> None:
        if self.ordering.offer(message.ordering_key, message):
            self.handout.offer(message)

    def _admit_all(self, messages: list[Message]) -> None:
        """``_admit`` for each of ``messages``, waking the reader once."""
        if any(m.ordering_key for m in messages):
            for message in messages:
                self._admit(message)
            return
        self.handout.offer_many(messages)

    # -------------------------------------------------------------- settling

    def settle(self, message: Message, operation: Operation, seconds: int, now: float) -> Position:
        """An ack / nack of ``message``: free its room and lease, enter it in the ledger."""
        # _release_settled, written out: this runs once per message, and the hand-out's
        # call is the one call it makes.
        if operation is Operation.ACK:
            self.histogram.record(now - message.received_at)
        self.leases.remove(message.ack_id)
        was_out = self._settled(message.ack_id)
        if message.ordering_key:
            self._key_settled(message.ordering_key, operation, was_out)
        if self.failure:
            # Nothing will send it: the session has failed.
            return unsent(message.ack_id, operation, f"the subscriber failed: {self.failure}")
        return self.ledger.submit(message.ack_id, operation, seconds)

    def settle_batch(
        self, messages: list[Message], operation: Operation, seconds: int, now: float
    ) -> list[Position]:
        """Settle ``messages`` together: each released as by :meth:`settle` (a modack
        extends each lease), one ledger record for all."""
        ack_ids = [m.ack_id for m in messages]
        if operation is Operation.MODACK:
            self.leases.extended(ack_ids, seconds, now)
            self._lease_check_soon(now, seconds)
        elif any(m.ordering_key for m in messages):
            for message in messages:
                self._release_settled(message, operation, now)
        else:
            # What _release_settled does, once for the batch: messages received in one
            # response share their receipt time, so the histogram takes a count each.
            if operation is Operation.ACK:
                received: dict[float, int] = {}
                for message in messages:
                    received[message.received_at] = received.get(message.received_at, 0) + 1
                for received_at, count in received.items():
                    self.histogram.record(now - received_at, count)
            self.leases.remove_many(ack_ids)
            self.handout.settled_many(ack_ids)
        if self.failure:
            record = settled_record(
                ack_ids,
                operation,
                AckResult(AcknowledgeStatus.OTHER, f"the subscriber failed: {self.failure}"),
            )
            return [(record, index) for index in range(len(ack_ids))]
        return [
            (record, index)
            for record in self.ledger.submit_many(ack_ids, operation, seconds)
            for index in range(len(record))
        ]

    def _release_settled(self, message: Message, operation: Operation, now: float) -> None:
        if operation is Operation.ACK:
            self.histogram.record(now - message.received_at)
        ack_id = message.ack_id
        self.leases.remove(ack_id)
        was_out = self._settled(ack_id)
        if message.ordering_key:
            self._key_settled(message.ordering_key, operation, was_out)

    def _key_settled(self, key: str, operation: Operation, was_out: bool) -> None:
        """A message of ``key`` was acked or nacked (``was_out``: the key's message out)."""
        if operation is Operation.NACK:
            # The server redelivers the rest of the key in order: drop our copies.
            self._drop_parked(key)
        if was_out:
            # Only the key's message out moves its key on: one released past max_lease
            # and settled late must not release the key's next message a second time.
            released = self.ordering.done(key)
            if released is not None:
                self.handout.offer(released)

    def extend(self, message: Message, seconds: int, now: float) -> Position:
        self.leases.extended([message.ack_id], seconds, now)
        self._lease_check_soon(now, seconds)
        return self.ledger.submit(message.ack_id, Operation.MODACK, seconds)

    def _drop_parked(self, key: str) -> None:
        """Forget the messages of ``key`` parked behind its message out: the server
        redelivers them, in order, after the one out is nacked or expires."""
        for stale in self.ordering.discard_key(key):
            self._forget(stale)
            if self.observer is not None:
                self.observer.released(stale, "dropped")

    def _forget(self, message: Message) -> None:
        """Stop leasing and counting a message (nacked at shutdown, dropped)."""
        self.leases.remove(message.ack_id)
        self.handout.forget(message.ack_id)

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
        expired: list[str] = []  # message ids of the messages released below
        for released in actions.released:
            message = self.handout.withdraw(released.ack_id)
            if released.ordering_key:
                # The server redelivers it and the rest of its key, in order, once the
                # lease runs out: the parked copies are stale, as after a nack.
                self._drop_parked(released.ordering_key)
                if message is not None:  # it was the key's message out (or about to be)
                    self.ordering.done(released.ordering_key)
            if message is not None:
                expired.append(message.message_id)
                if self.observer is not None:
                    self.observer.released(message, "expired")
        if expired:
            # One record for all of them (never a line per message at INFO): the
            # application held them past max_lease, so each comes again.
            logger.info(
                "%d messages held past max_lease (%g s) were released for redelivery",
                len(expired),
                self.lease_settings.max_lease,
            )
            logger.debug("released past max_lease: message ids %s", ", ".join(expired))
        if actions.extend:
            logger.debug(
                "extending %d leases by %d s", len(actions.extend), actions.deadline_seconds
            )
            self.ledger.submit_many(actions.extend, Operation.MODACK, actions.deadline_seconds)

    # -------------------------------------------------------------- shutdown

    def stop(self) -> None:
        """Shutdown begins: nack every message not handed out; admit nothing more."""
        self.stopped = True
        never_out = self.handout.waiting() + self.ordering.drain()
        for message in never_out:
            self._forget(message)
        if never_out:
            self.ledger.submit_many([m.ack_id for m in never_out], Operation.NACK)
        # Cleared after the loop: forgetting one message frees room that moves a held
        # one to ``ready`` (it is nacked above all the same, and must not be handed out).
        self.handout.clear_waiting()

    def nack_outstanding(self) -> None:
        """Shutdown: nack what the application still holds; its later acks report OTHER."""
        outstanding = self.handout.take_out()
        if not outstanding:
            return
        self.ledger.submit_many([m.ack_id for m in outstanding], Operation.NACK)
        record = settled_record(
            [m.ack_id for m in outstanding],
            Operation.NACK,
            AckResult(AcknowledgeStatus.OTHER, "shutdown initiated, already nacked"),
        )
        for index, message in enumerate(outstanding):
            message._record_settlement(Operation.NACK, (record, index))
            self._forget(message)

    def statistics(self) -> DispatchStatistics:
        flow = self.handout.flow.statistics()
        return DispatchStatistics(
            outstanding_messages=flow.outstanding_messages,
            outstanding_bytes=flow.outstanding_bytes,
            held_messages=len(self.held) + self.ordering.statistics().parked_messages,
            leased_messages=self.leases.statistics().leased_messages,
            received=self.received,
            expired=self.leases.statistics().released_for_max_lease,
        )


def unsent(ack_id: str, operation: Operation, info: str) -> Position:
    """A settlement that will not be sent, resolved OTHER with ``info``."""
    return settled_record([ack_id], operation, AckResult(AcknowledgeStatus.OTHER, info)), 0
