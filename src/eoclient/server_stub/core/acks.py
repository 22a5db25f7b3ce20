"""Acknowledge and ModifyAckDeadline: the exactly-once rules, and injected ack failures.

Exactly-once rules (docs/protocol.md#exactly-once-semantics, docs/protocol.md#ack-id-state-machine),
all enforced in ``acknowledge`` and
``modify_ack_deadline`` through ``SubscriptionDelivery.resolve_parts``: a new ack id per
delivery; only the latest delivery's id is valid; an id is invalid once its deadline
passed (even before any redelivery), once the message was acked, nacked or redelivered;
no redelivery while a lease is live; invalid ids fail one by one while valid ones in the
same request are applied; with ordering, acking a message while an earlier delivered
message of its key is unacked fails with TRANSIENT_FAILURE_UNORDERED_ACK_ID.

Without exactly-once, acks are best effort: an ack of an older delivery still settles
the message, and modacks of stale ids are ignored; an id this server never issued
refuses the whole request (INVALID_ARGUMENT, as the emulator does).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from eoclient._clock import Clock
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import validation
from eoclient.server_stub.core.ack_ids import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TRANSIENT_FAILURE_UNORDERED_ACK_ID,
    parse_ack_id,
    parse_ack_ids,
)
from eoclient.server_stub.core.delivery import AckTarget, SubscriptionDelivery
from eoclient.server_stub.core.history import History
from eoclient.server_stub.core.model import AckReply
from eoclient.server_stub.core.resources import Resources, SubscriptionState

Operation = Literal["ack", "modack"]


@dataclass
class AckFault:
    """An injected per-message ack/modack failure (test instrument)."""

    reason: str
    remaining: int  # how many more requests fail; < 0 = forever
    operations: frozenset[str]


class Acks:
    """Acks and modacks over the subscriptions of ``resources``."""

    def __init__(
        self,
        clock: Clock,
        resources: Resources,
        history: History,
        changed: Callable[[str], None],
    ) -> None:
        self._clock = clock
        self._resources = resources
        self._history = history
        self._changed = changed
        self._faults: dict[tuple[str, str], AckFault] = {}

    def acknowledge(self, name: str, ack_ids: Sequence[str]) -> AckReply:
        subscription = self._resources.subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        return self._apply(subscription, ack_ids, "ack", 0)

    def modify_ack_deadline(self, name: str, ack_ids: Sequence[str], seconds: int) -> AckReply:
        subscription = self._resources.subscription(name)
        if not ack_ids:
            raise InvalidArgument("You have not specified an ack ID in the request.")
        validation.modack_seconds(seconds)
        return self._apply(subscription, ack_ids, "modack", seconds)

    def _apply(
        self,
        subscription: SubscriptionState,
        ack_ids: Sequence[str],
        operation: Operation,
        seconds: int,
    ) -> AckReply:
        now = self._clock.now()
        name = subscription.config.name
        delivery = subscription.delivery
        delivery.advance(now)
        self._resources.touch(subscription, now)
        exactly_once = subscription.config.enable_exactly_once_delivery
        pending = self._apply_batch(subscription, ack_ids, operation, seconds)
        # A lease that moved changes nothing a waiter waits for; a settled or a nacked
        # one does (a message to deliver again).
        changed = (
            (operation == "ack" or seconds == 0)
            and pending is not None
            and len(pending) < len(ack_ids)
        )
        if pending is None:
            pending = range(len(ack_ids))
            if not exactly_once:
                self._check_wellformed(delivery, ack_ids)
        failed, failures, changed_one = self._apply_each(
            name, delivery, ack_ids, pending, operation, seconds, now, exactly_once
        )
        for reason in failures.values():
            delivery.counters.ack_failed(operation, reason)
        if changed or changed_one:
            self._changed(name)
        confirmed = (
            tuple(ack_id for i, ack_id in enumerate(ack_ids) if i not in failed)
            if failed
            else tuple(ack_ids)
        )
        return AckReply(confirmed, failures, exactly_once)

    def _apply_batch(
        self,
        subscription: SubscriptionState,
        ack_ids: Sequence[str],
        operation: Operation,
        seconds: int,
    ) -> Sequence[int] | None:
        """The common requests — acks, modacks that extend and nacks, of ids this
        subscription issued under its current uid — applied at once
        (``SubscriptionDelivery.ack_many``, ``extend_many``, ``nack_many``): the positions
        of the ids left for ``_apply_each`` (stale, repeated, restored ones: their answers
        are there). None: the request is not a common one, every id goes one by one —
        injected faults, the history recording each answer, nacks with ordering keys (each
        rewinds its key's later messages), and acks with exactly-once and ordering keys
        (each checks its key's earlier messages)."""
        config = subscription.config
        if (
            (operation == "modack" and seconds == 0 and config.enable_message_ordering)
            or self._faults
            or self._history.enabled
            or (
                operation == "ack"
                and config.enable_exactly_once_delivery
                and config.enable_message_ordering
            )
        ):
            return None
        delivery = subscription.delivery
        parsed = parse_ack_ids(delivery.uid, ack_ids)
        if parsed is None:
            return None
        seqs, generations = parsed
        if operation == "modack":
            if seconds == 0:
                return delivery.nack_many(seqs, generations)
            return delivery.extend_many(seqs, generations, seconds)
        return delivery.ack_many(seqs, generations, exact=config.enable_exactly_once_delivery)

    @staticmethod
    def _check_wellformed(delivery: SubscriptionDelivery, ack_ids: Sequence[str]) -> None:
        for ack_id in ack_ids:
            if not delivery.wellformed_parts(parse_ack_id(ack_id)):
                # The real service rejects ids it never issued, even without
                # exactly-once (the emulator: "Invalid ack id (ack_id=bogus)").
                raise InvalidArgument(
                    f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
                )

    def _apply_each(
        self,
        name: str,
        delivery: SubscriptionDelivery,
        ack_ids: Sequence[str],
        pending: Iterable[int],
        operation: Operation,
        seconds: int,
        now: float,
        exactly_once: bool,
    ) -> tuple[set[int], dict[str, str], bool]:
        """The ids at positions ``pending``, one by one: the positions that failed, the
        failures by id, and whether anything changed."""
        failed: set[int] = set()
        failures: dict[str, str] = {}
        changed = False
        history = self._history
        recording = history.enabled
        faults = self._faults
        for i in pending:
            ack_id = ack_ids[i]
            parts = parse_ack_id(ack_id)
            entry = delivery.resolve_parts(parts)
            fault = self._take_fault(name, entry, operation) if faults else ""
            if fault:
                failed.add(i)
                failures[ack_id] = fault
                history.answered(name, entry, ack_id, operation, seconds, now, fault)
                continue
            if entry is None:
                if exactly_once:
                    failed.add(i)
                    failures[ack_id] = PERMANENT_FAILURE_INVALID_ACK_ID
                    history.answered(
                        name,
                        None,
                        ack_id,
                        operation,
                        seconds,
                        now,
                        PERMANENT_FAILURE_INVALID_ACK_ID,
                    )
                    continue
                # Without exactly-once an ack of an older delivery still settles the
                # message (acks are best effort, an expired id may be honoured);
                # modacks of stale ids are ignored.
                stale = delivery.lookup_parts(parts) if operation == "ack" else None
                history.answered(name, stale, ack_id, operation, seconds, now, "")
                if stale is not None:
                    delivery.ack(stale)
                    changed = True
                continue
            if operation == "ack":
                if exactly_once and delivery.first_unacked_before(entry):
                    failed.add(i)
                    failures[ack_id] = TRANSIENT_FAILURE_UNORDERED_ACK_ID
                    history.answered(
                        name,
                        entry,
                        ack_id,
                        operation,
                        seconds,
                        now,
                        TRANSIENT_FAILURE_UNORDERED_ACK_ID,
                    )
                    continue
                if recording:
                    history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.ack(entry)
            elif seconds == 0:
                history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.nack(entry, now)
            else:
                history.answered(name, entry, ack_id, operation, seconds, now, "")
                delivery.extend(entry, now, seconds)
            changed = changed or operation == "ack" or seconds == 0
        return failed, failures, changed

    def inject_failure(
        self,
        subscription: str,
        message_id: str,
        reason: str,
        *,
        times: int = 1,
        operations: Iterable[str] = ("ack", "modack"),
    ) -> None:
        """Make the next ``times`` acks/modacks of a message fail with ``reason`` (-1: always).

        ``reason`` is an ErrorInfo metadata value such as ``TRANSIENT_FAILURE_OTHER`` or
        ``PERMANENT_FAILURE_OTHER``; a failed request is not applied.
        """
        self._faults[(subscription, message_id)] = AckFault(reason, times, frozenset(operations))

    def _take_fault(self, subscription: str, entry: AckTarget | None, operation: str) -> str:
        if entry is None or not self._faults:
            return ""
        fault = self._faults.get((subscription, entry.message_id))
        if fault is None or operation not in fault.operations or fault.remaining == 0:
            return ""
        if fault.remaining > 0:
            fault.remaining -= 1
        return fault.reason
