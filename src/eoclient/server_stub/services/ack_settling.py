"""Acks and modacks for both doors and both paths (unary RPCs and StreamingPull requests).

A bad ack id fails alone: it never costs the other ids of its request, and never ends a
stream.

* Ids that cannot be the service's (``request_checks.plausible_ack_id``: not printable
  ASCII, or too long) never reach the core: on an exactly-once subscription each fails
  with PERMANENT_FAILURE_INVALID_ACK_ID (the ErrorInfo value the service gives ids it
  cannot resolve, docs/protocol.md#exactly-once-error-details); otherwise it is ignored and
  reported in
  ``Settled.rejected``.
* Without exactly-once the core refuses a whole request naming an id this server never
  issued (INVALID_ARGUMENT, like the emulator); the other ids of that request are then
  applied one by one, so only the refused ids are lost — a unary call still answers
  INVALID_ARGUMENT naming them, a stream ignores them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import AckReply, Broker
from eoclient.server_stub.services.request_checks import all_plausible_ack_ids, plausible_ack_id

PERMANENT_FAILURE_INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"


@dataclass(frozen=True)
class Settled:
    """What became of the ids of one ack or modack request.

    ``reply`` is the core's per-id outcome (with exactly-once, door-refused ids are among
    its failures); ``rejected`` are ids refused without exactly-once (not applied), with
    the reason of the first.
    """

    reply: AckReply
    rejected: tuple[str, ...] = ()
    reason: str = ""

    def refusal(self) -> InvalidArgument | None:
        """The unary answer for ``rejected`` ids: INVALID_ARGUMENT naming them."""
        if not self.rejected:
            return None
        if self.reason and (len(self.rejected) == 1 or not self.reply.confirmed):
            return InvalidArgument(self.reason)
        shown = ", ".join(_shown(ack_id) for ack_id in self.rejected[:5])
        more = f" and {len(self.rejected) - 5} more" if len(self.rejected) > 5 else ""
        return InvalidArgument(
            f"You have passed invalid ack IDs to the service (ack_ids={shown}{more}); "
            "the other ack IDs of the request were applied."
        )


def _shown(ack_id: str) -> str:
    # Names the id in an error message without echoing megabytes or control characters.
    text = ack_id if len(ack_id) <= 80 else ack_id[:80] + "..."
    return text.encode("ascii", "backslashreplace").decode("ascii")


def acknowledge(broker: Broker, subscription: str, ack_ids: Sequence[str]) -> Settled:
    return _settle(
        broker, subscription, ack_ids, lambda ids: broker.acks.acknowledge(subscription, ids)
    )


def modify_ack_deadline(
    broker: Broker, subscription: str, ack_ids: Sequence[str], seconds: int
) -> Settled:
    return _settle(
        broker,
        subscription,
        ack_ids,
        lambda ids: broker.acks.modify_ack_deadline(subscription, ids, seconds),
    )


def _settle(
    broker: Broker,
    subscription: str,
    ack_ids: Sequence[str],
    apply: Callable[[Sequence[str]], AckReply],
) -> Settled:
    # A protobuf repeated field makes a new str each time an id is read: read them once.
    ids = list(ack_ids)
    # Almost every request has only plausible ids: one check of the whole request
    # spares looking at each id twice.
    if all_plausible_ack_ids(ids):
        plausible, implausible = ids, []
    else:
        plausible = [ack_id for ack_id in ids if plausible_ack_id(ack_id)]
        implausible = [ack_id for ack_id in ids if not plausible_ack_id(ack_id)]
    if implausible and not plausible:
        exactly_once, _ = broker.subscriptions.properties(subscription)  # e.g. NOT_FOUND
        reply = AckReply((), {}, exactly_once)
    else:
        try:
            reply = apply(plausible)  # an empty request is the core's error to give
        except InvalidArgument as error:
            if not plausible or broker.subscriptions.properties(subscription)[0]:
                raise
            return _one_by_one(plausible, implausible, apply, error)
    if not implausible:
        return Settled(reply)
    if reply.exactly_once:
        failures = dict(reply.failures)
        failures.update((ack_id, PERMANENT_FAILURE_INVALID_ACK_ID) for ack_id in implausible)
        return Settled(AckReply(reply.confirmed, failures, True))
    return Settled(
        reply,
        tuple(implausible),
        f"You have passed an invalid ack ID to the service (ack_id={_shown(implausible[0])}).",
    )


def _one_by_one(
    plausible: Sequence[str],
    implausible: Sequence[str],
    apply: Callable[[Sequence[str]], AckReply],
    error: InvalidArgument,
) -> Settled:
    """Without exactly-once the core refused the whole request (an id it never issued,
    or a bad deadline): apply each id alone, so only the refused ones are lost (their
    order does not matter without exactly-once)."""
    confirmed: list[str] = []
    rejected = list(implausible)
    for ack_id in plausible:
        try:
            confirmed.extend(apply([ack_id]).confirmed)
        except InvalidArgument:
            rejected.append(ack_id)
    return Settled(AckReply(tuple(confirmed), {}, False), tuple(rejected), error.message)
