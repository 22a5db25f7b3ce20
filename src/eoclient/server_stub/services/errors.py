"""The errors a call can end with, in the shape both doors send them.

Exactly-once ack failures raise ``ExactlyOnceAckFailure`` with the real service's shape
(docs/protocol.md#exactly-once-error-details): INVALID_ARGUMENT, the real message text, and a
``google.rpc.Status`` (sent in ``grpc-status-details-bin`` / the JSON error's
``details``) whose first detail is an ErrorInfo with reason EXACTLY_ONCE_ACKID_FAILURE,
domain pubsub.googleapis.com and ack id → failure metadata; the Status repeats the
call's code and message exactly, because the official client ignores details otherwise
(docs/protocol.md#rich-status-trailer).
"""

from __future__ import annotations

from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from eoclient.errors import InvalidArgument, RpcError
from eoclient.server_stub.core import AckReply

ERROR_INFO_REASON = "EXACTLY_ONCE_ACKID_FAILURE"
ERROR_INFO_DOMAIN = "pubsub.googleapis.com"
# The real service's texts (docs/protocol.md#exactly-once-error-details; java-pubsub#1974 for
# "out of order").
INVALID_ACK_IDS_MESSAGE = (
    "Some acknowledgement ids in the request were invalid. This could be because the "
    "acknowledgement ids have expired or the acknowledgement ids were malformed."
)
UNORDERED_ACK_IDS_MESSAGE = "Some acknowledgement ids in the request were sent out of order"
TRANSIENT_ACK_IDS_MESSAGE = (
    "Some acknowledgement ids in the request failed temporarily; retry them."
)

# What either door answers (INTERNAL) when a request meets a bug, which is logged.
INTERNAL_ERROR_MESSAGE = "Internal error in the reference server (its log has the details)."

_RPC_CODE_BY_NAME: dict[str, int] = dict(code_pb2.Code.items())


def exactly_once_failure_status(reply: AckReply) -> tuple[str, status_pb2.Status]:
    """The message and rich status for an exactly-once Acknowledge/ModifyAckDeadline failure."""
    values = set(reply.failures.values())
    if any(v.startswith("PERMANENT_") for v in values):
        message = INVALID_ACK_IDS_MESSAGE
    elif values == {"TRANSIENT_FAILURE_UNORDERED_ACK_ID"}:
        message = UNORDERED_ACK_IDS_MESSAGE
    else:
        message = TRANSIENT_ACK_IDS_MESSAGE
    info = error_details_pb2.ErrorInfo(
        reason=ERROR_INFO_REASON, domain=ERROR_INFO_DOMAIN, metadata=dict(reply.failures)
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code_pb2.INVALID_ARGUMENT, message=message, details=[detail])
    return message, status


class ExactlyOnceAckFailure(InvalidArgument):
    """Some ack ids of an Acknowledge/ModifyAckDeadline failed on an exactly-once subscription.

    ``status`` is the rich ``google.rpc.Status`` (ErrorInfo first) both doors send; the
    other ids of the request were applied.
    """

    def __init__(self, reply: AckReply) -> None:
        message, status = exactly_once_failure_status(reply)
        super().__init__(message, reason=ERROR_INFO_REASON, error_info=reply.failures)
        self.status = status


def rich_status(error: RpcError) -> status_pb2.Status:
    """The ``google.rpc.Status`` for ``error`` (with its details, if it has any)."""
    if isinstance(error, ExactlyOnceAckFailure):
        return error.status
    code = _RPC_CODE_BY_NAME.get(error.code, code_pb2.UNKNOWN)
    return status_pb2.Status(code=code, message=error.message)
