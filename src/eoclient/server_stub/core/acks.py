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
)
from eoclient.server_stub.core.delivery import AckTarget
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
        parsed = [parse_ack_id(ack_id) for ack_id in ack_ids]
        if not exactly_once:
            for ack_id, parts in zip(ack_ids, parsed, strict=True):
                if not delivery.wellformed_parts(parts):
                    # The real service rejects ids it never issued, even without
                    # exactly-once (the emulator: "Invalid ack id (ack_id=bogus)").
                    raise InvalidArgument(
                        f"You have passed an invalid ack ID to the service (ack_id={ack_id})."
                    )
        confirmed: list[str] = []
        failures: dict[str, str] = {}
        changed = False
        history = self._history
        recording = history.enabled
        faults = self._faults
        for ack_id, parts in zip(ack_ids, parsed, strict=True):
            entry = delivery.resolve_parts(parts)
            fault = self._take_fault(name, entry, operation) if faults else ""
            if fault:
                failures[ack_id] = fault
                history.answered(name, entry, ack_id, operation, seconds, now, fault)
                continue
            if entry is None:
                if exactly_once:
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
                confirmed.append(ack_id)
                continue
            if operation == "ack":
                if exactly_once and delivery.first_unacked_before(entry):
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
            confirmed.append(ack_id)
        for reason in failures.values():
            delivery.counters.ack_failed(operation, reason)
        if changed:
            self._changed(name)
        return AckReply(tuple(confirmed), failures, exactly_once)

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
