"""What a StreamingPull answers on the stream besides deliveries: the confirmations of an
exactly-once subscription's acks and modacks, and the answer to a keep-alive.

Each per-id failure the core reports (an ErrorInfo value: ``PERMANENT_FAILURE_INVALID_ACK_ID``,
``TRANSIENT_FAILURE_UNORDERED_ACK_ID``, ...) goes to one list of the confirmation
(docs/protocol.md#streamingpull-confirmations): a permanent failure is an invalid id, an
unordered ack is unordered (a modack has no such list: a temporary failure), any other
transient failure is temporary. Every response carries the subscription's properties,
from which a client learns its mode (docs/protocol.md#streamingpull-requests).
"""

from __future__ import annotations

from typing import Any

from eoclient._proto import pubsub_pb2
from eoclient.server_stub.core import AckReply

UNORDERED = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
PERMANENT_PREFIX = "PERMANENT_"

Properties = pubsub_pb2.StreamingPullResponse.SubscriptionProperties


def properties(exactly_once: bool, ordering: bool) -> Properties:
    return Properties(exactly_once_delivery_enabled=exactly_once, message_ordering_enabled=ordering)


def confirmation(
    acks: AckReply | None, modacks: list[AckReply], subscription: Properties
) -> pubsub_pb2.StreamingPullResponse | None:
    """The response confirming a request's acks and modacks (one reply per deadline the
    request's modacks named); None when the subscription has no exactly-once delivery
    (nothing is confirmed then)."""
    response = pubsub_pb2.StreamingPullResponse()
    confirmed = False
    if acks is not None and acks.exactly_once:
        confirmed = True
        fill_ack_confirmation(response.acknowledge_confirmation, acks)
    for reply in modacks:
        if reply.exactly_once:
            confirmed = True
            fill_modack_confirmation(response.modify_ack_deadline_confirmation, reply)
    if not confirmed:
        return None
    response.subscription_properties.CopyFrom(subscription)
    return response


def keepalive(subscription: Properties) -> pubsub_pb2.StreamingPullResponse:
    """The answer to a keep-alive ping under protocol_version >= 1: no messages, the
    properties (docs/protocol.md#initial-streamingpull-request)."""
    response = pubsub_pb2.StreamingPullResponse()
    response.subscription_properties.CopyFrom(subscription)
    return response


def fill_ack_confirmation(
    target: pubsub_pb2.StreamingPullResponse.AcknowledgeConfirmation, reply: AckReply
) -> None:
    target.ack_ids.extend(reply.confirmed)
    for ack_id, failure in reply.failures.items():
        _ack_list(target, failure).append(ack_id)


def fill_modack_confirmation(
    target: pubsub_pb2.StreamingPullResponse.ModifyAckDeadlineConfirmation, reply: AckReply
) -> None:
    target.ack_ids.extend(reply.confirmed)
    for ack_id, failure in reply.failures.items():
        if failure.startswith(PERMANENT_PREFIX):
            target.invalid_ack_ids.append(ack_id)
        else:
            target.temporary_failed_ack_ids.append(ack_id)


def _ack_list(
    target: pubsub_pb2.StreamingPullResponse.AcknowledgeConfirmation, failure: str
) -> Any:
    if failure == UNORDERED:
        return target.unordered_ack_ids
    if failure.startswith(PERMANENT_PREFIX):
        return target.invalid_ack_ids
    return target.temporary_failed_ack_ids
