"""The one exception tree of eoclient.

::

    EoclientError                     root of everything eoclient raises on purpose
    ├── ClosedError                   the client, stream or publisher was closed
    ├── FlowControlLimitError         a publish would exceed flow control (behaviour ERROR)
    ├── OrderingKeyPausedError        publishing to an ordering key paused by an earlier failure
    ├── MessageTooLargeError          a message can never fit in one publish request
    └── RpcError                      the server answered with a non-OK gRPC status
        ├── Cancelled                 CANCELLED
        ├── Unknown                   UNKNOWN              (retryable)
        ├── InvalidArgument           INVALID_ARGUMENT
        ├── DeadlineExceeded          DEADLINE_EXCEEDED    (retryable)
        ├── NotFound                  NOT_FOUND
        ├── AlreadyExists             ALREADY_EXISTS
        ├── PermissionDenied          PERMISSION_DENIED
        ├── ResourceExhausted         RESOURCE_EXHAUSTED   (retryable)
        ├── FailedPrecondition        FAILED_PRECONDITION
        ├── Aborted                   ABORTED              (retryable)
        ├── OutOfRange                OUT_OF_RANGE
        ├── Unimplemented             UNIMPLEMENTED
        ├── Internal                  INTERNAL             (retryable)
        ├── Unavailable               UNAVAILABLE          (retryable)
        ├── DataLoss                  DATA_LOSS
        └── Unauthenticated           UNAUTHENTICATED

Every class says whether retrying the same call can succeed (``retryable``); the
retryable set is the one the official clients retry for streams and exactly-once
acks (client-anchors §1.6, §1.8). gRPC errors become these classes in exactly one
place, :func:`eoclient._transport.rpc_error_from_grpc`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "ClosedError",
    "DataLoss",
    "DeadlineExceeded",
    "EoclientError",
    "FailedPrecondition",
    "FlowControlLimitError",
    "Internal",
    "InvalidArgument",
    "MessageTooLargeError",
    "NotFound",
    "OrderingKeyPausedError",
    "OutOfRange",
    "PermissionDenied",
    "ResourceExhausted",
    "RpcError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "rpc_error_class",
]


class EoclientError(Exception):
    """Root of every error eoclient raises on purpose."""

    retryable: ClassVar[bool] = False


class ClosedError(EoclientError):
    """The client, stream or publisher has been closed; it cannot be used again."""


class FlowControlLimitError(EoclientError):
    """A publish would exceed the publisher's flow control limits (behaviour ERROR)."""


class OrderingKeyPausedError(EoclientError):
    """A publish to an ordering key that an earlier failure paused.

    Call ``resume_publish(topic, ordering_key)`` once the cause is dealt with.
    """

    def __init__(self, topic: str, ordering_key: str) -> None:
        super().__init__(
            f"publishing to ordering key {ordering_key!r} on {topic} is paused after an earlier "
            "failure; call resume_publish(topic, ordering_key) to publish to it again"
        )
        self.topic = topic
        self.ordering_key = ordering_key


class MessageTooLargeError(EoclientError):
    """A single message can never fit in one publish request."""


class RpcError(EoclientError):
    """The server answered with a non-OK status.

    Attributes:
        code: the canonical status name, e.g. ``"NOT_FOUND"``.
        message: the server's message, unchanged.
        error_info: ``google.rpc.ErrorInfo`` metadata when the server sent one
            (exactly-once ack failures map ack id → failure reason here).
        reason: the ErrorInfo reason, or ``""``.
    """

    code: ClassVar[str] = "UNKNOWN"

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        error_info: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{self.code}: {message}" if message else self.code)
        self.message = message
        self.reason = reason
        self.error_info: Mapping[str, str] = dict(error_info or {})


class Cancelled(RpcError):
    code = "CANCELLED"


class Unknown(RpcError):
    code = "UNKNOWN"
    retryable = True


class InvalidArgument(RpcError):
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(RpcError):
    code = "DEADLINE_EXCEEDED"
    retryable = True


class NotFound(RpcError):
    code = "NOT_FOUND"


class AlreadyExists(RpcError):
    code = "ALREADY_EXISTS"


class PermissionDenied(RpcError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(RpcError):
    code = "RESOURCE_EXHAUSTED"
    retryable = True


class FailedPrecondition(RpcError):
    code = "FAILED_PRECONDITION"


class Aborted(RpcError):
    code = "ABORTED"
    retryable = True


class OutOfRange(RpcError):
    code = "OUT_OF_RANGE"


class Unimplemented(RpcError):
    code = "UNIMPLEMENTED"


class Internal(RpcError):
    code = "INTERNAL"
    retryable = True


class Unavailable(RpcError):
    code = "UNAVAILABLE"
    retryable = True


class DataLoss(RpcError):
    code = "DATA_LOSS"


class Unauthenticated(RpcError):
    code = "UNAUTHENTICATED"


_BY_CODE: dict[str, type[RpcError]] = {
    cls.code: cls
    for cls in (
        Cancelled,
        Unknown,
        InvalidArgument,
        DeadlineExceeded,
        NotFound,
        AlreadyExists,
        PermissionDenied,
        ResourceExhausted,
        FailedPrecondition,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unavailable,
        DataLoss,
        Unauthenticated,
    )
}


def rpc_error_class(code: str) -> type[RpcError]:
    """The RpcError subclass for a canonical status name (``Unknown`` if unrecognised)."""
    return _BY_CODE.get(code, Unknown)
