"""The one exception tree of eoclient.

::

    EoclientError                     root of everything eoclient raises on purpose
    ├── ClosedError                   the client, stream or publisher was closed
    ├── StreamClosedError             a write to a stream that has ended
    ├── FlowControlLimitError         a publish would exceed flow control (behaviour ERROR)
    ├── OrderingKeyPausedError        an ordering key paused by an earlier failure
    ├── MessageTooLargeError          a message can never fit in one publish request
    ├── SparkConnectorError           the Spark connector cannot run so configured
    ├── CredentialsError              a TLS endpoint without usable credentials
    └── RpcError                      the server answered with a non-OK gRPC status
        ├── Cancelled                 CANCELLED
        ├── Unknown                   UNKNOWN              (retryable)
        ├── InvalidArgument           INVALID_ARGUMENT
        │   └── SchemaValidationError INVALID_ARGUMENT     a message breaks its schema
        ├── DeadlineExceeded          DEADLINE_EXCEEDED    (retryable)
        ├── NotFound                  NOT_FOUND
        ├── AlreadyExists             ALREADY_EXISTS
        ├── PermissionDenied          PERMISSION_DENIED
        ├── ResourceExhausted         RESOURCE_EXHAUSTED   (retryable: quota, flow limit)
        │   └── SizeLimitExceeded     RESOURCE_EXHAUSTED   a gRPC message or metadata limit
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
acks (docs/protocol.md#status-codes-and-retryability). gRPC errors become these classes
in exactly one place, :func:`eoclient._transport.rpc_error_from_grpc`, which picks the class with
:func:`rpc_error_class` from the status code *and* its message.

Which failures are transient (the classification every retry in eoclient follows)
------------------------------------------------------------------------------------

===================  ==========  ====================================================
status               retryable   why
===================  ==========  ====================================================
UNAVAILABLE          yes         server restarting / connection lost (incl. the local
                                 "failed to connect"): the next attempt may reach it
DEADLINE_EXCEEDED    yes         the call's own timeout, local or server-side
RESOURCE_EXHAUSTED   yes         a quota or flow-control limit of the *server*; Google's
                                 exactly-once ack retry and stream reconnect retry it
                                 (docs/protocol.md#status-codes-and-retryability)
  … size limit       **no**      the message text says a *size* limit was exceeded:
                                 gRPC core's "Received message larger than max (N vs.
                                 M)" / "Sent message larger than max" (message-size
                                 filter; prefixed "CLIENT:" or "SERVER:") and
                                 "received metadata size exceeds soft|hard limit"
                                 (chttp2 ``hpack_parse_result.cc``). The local stack
                                 (or the server's, for your request) raises these before
                                 the call's answer is read; the same request meets the
                                 same limit every time, so retrying only burns the retry
                                 deadline (2,000 expired acks were once reported OTHER
                                 after 33 s instead of INVALID_ACK_ID at once).
                                 :class:`SizeLimitExceeded`.
ABORTED              yes         concurrency conflict on the server
INTERNAL             yes         as the official clients (includes a stream reset). One
                                 reset is deterministic: a Java (netty) server such as
                                 the emulator resets the stream, "Received RST_STREAM
                                 with error code 1", rather than send trailers over the
                                 metadata limit the client advertised; the 4 MiB limit
                                 (``_endpoint.MAX_METADATA_BYTES``) keeps ack answers
                                 under it. It stays retryable: the text does not say
                                 why the peer reset, and streams must recover from
                                 resets as Google's clients do
UNKNOWN              yes         as the official clients for streams
                                 (docs/protocol.md#stream-reconnection)
everything else      no          the same request gets the same answer (CANCELLED is the
                                 caller's own cancellation; the publisher alone retries
                                 it, see ``RETRYABLE_PUBLISH_CODES``)
===================  ==========  ====================================================

A quota RESOURCE_EXHAUSTED and a size-limit one share the status code; only the message
tells them apart. gRPC puts the text above in the status details of a locally generated
error (measured with grpcio 1.85: ``details()`` = "Stream removed (received metadata size
exceeds hard limit (value length 113155 vs. 16384))", no trailing metadata), and the
service's quota errors never mention "larger than max" or "metadata size exceeds".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "ClosedError",
    "CredentialsError",
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
    "SchemaValidationError",
    "SizeLimitExceeded",
    "SparkConnectorError",
    "StreamClosedError",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "is_retryable",
    "is_size_limit",
    "rpc_error_class",
]


class EoclientError(Exception):
    """Root of every error eoclient raises on purpose."""

    retryable: ClassVar[bool] = False


class ClosedError(EoclientError):
    """The client, stream or publisher has been closed; it cannot be used again."""


class StreamClosedError(EoclientError):
    """A request was written to a stream that has ended, or that the client half-closed.

    Internal to the subscriber's stream handling: the task reading the stream receives
    the status the call ended with, and decides (reconnect or fail).
    """


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


class CredentialsError(EoclientError):
    """A TLS endpoint has no usable credentials: none found by Application Default
    Credentials, credentials that cannot carry the quota project, a universe domain that
    is not theirs, or google-auth missing. Raised when the client connects; the message
    says what to do (and how to say plain text, for a local server)."""


class SparkConnectorError(EoclientError, ValueError):
    """The Spark connector cannot run as configured: an unknown or bad option, or a
    subscription that is missing or lacks exactly-once delivery. The message says what to
    change; it reaches the user as one line (``eoclient.spark._errors``)."""


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


class SchemaValidationError(InvalidArgument):
    """INVALID_ARGUMENT because a message does not match the schema of its topic (Publish)
    or the schema named (ValidateMessage). Permanent: the same data fails again.

    Recognised by the status message: the service's "Invalid data in message: Message
    failed schema validation." (``SCHEMA_MISMATCH_TEXTS``; Google's emulator answers
    "Could not parse message" / "Could not parse JSON Avro message").
    """


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


class SizeLimitExceeded(ResourceExhausted):
    """RESOURCE_EXHAUSTED for a gRPC message or metadata size limit: permanent.

    Raised by the local gRPC stack (a response or its trailers larger than the channel
    allows, a request larger than it may send) or by the server for your request. The same
    request meets the same limit again, so it is never retried (see the table above).
    """

    retryable = False


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


# Substrings of gRPC core's size-limit errors (see the table in the module docstring):
# the message-size filter's "Received / Sent message larger than max (N vs. M)" and the
# HPACK parser's "received metadata size exceeds soft / hard limit (...)".
SIZE_LIMIT_TEXTS: tuple[str, ...] = ("message larger than max", "metadata size exceeds")


def is_size_limit(message: str) -> bool:
    """Whether a RESOURCE_EXHAUSTED status message names a gRPC size limit."""
    return any(text in message for text in SIZE_LIMIT_TEXTS)


# INVALID_ARGUMENT texts of a schema mismatch: the service's (and the reference server's),
# then Google's emulator's for Publish and for ValidateMessage.
SCHEMA_MISMATCH_TEXTS: tuple[str, ...] = (
    "failed schema validation",
    "Could not parse message",
    "Could not parse JSON Avro message",
)


def rpc_error_class(code: str, message: str = "") -> type[RpcError]:
    """The RpcError subclass for a canonical status name and its message.

    ``Unknown`` if the name is unrecognised; :class:`SizeLimitExceeded` for a
    RESOURCE_EXHAUSTED whose message names a size limit; :class:`SchemaValidationError`
    for an INVALID_ARGUMENT whose message says a message failed its schema.
    """
    if code == "RESOURCE_EXHAUSTED" and is_size_limit(message):
        return SizeLimitExceeded
    if code == "INVALID_ARGUMENT" and any(text in message for text in SCHEMA_MISMATCH_TEXTS):
        return SchemaValidationError
    return _BY_CODE.get(code, Unknown)


def is_retryable(code: str, message: str = "") -> bool:
    """Whether a call that failed with this status may succeed if sent again.

    The one classification table (module docstring); a name that is not a canonical
    status (``rpc_error_class`` maps it to ``Unknown``) is not UNKNOWN and not retried.
    """
    cls = rpc_error_class(code, message)
    return cls.retryable and (cls.code == code)
