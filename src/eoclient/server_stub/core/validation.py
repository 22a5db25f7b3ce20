"""Validation of properties and requests, with the real service's ranges and codes.

Sources: docs/protocol.md#subscription-properties-and-defaults (bounds),
docs/protocol.md#validation-and-error-texts (observed texts; where the real text is
known it is used, elsewhere the emulator's "The value for X is out of bounds. You
passed ..." shape is followed so that every message names the field, the value and
the allowed range).
"""

from __future__ import annotations

from collections.abc import Sequence

from eoclient.errors import InvalidArgument, OutOfRange
from eoclient.server_stub.core.model import (
    DeadLetterPolicy,
    ExpirationPolicy,
    NewMessage,
    RetryPolicy,
)

MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600
MAX_MODACK_SECONDS = 600
MIN_RETENTION = 10 * 60.0  # 10 minutes
MAX_RETENTION = 31 * 24 * 3600.0  # 31 days
MIN_EXPIRATION_TTL = 24 * 3600.0  # 1 day
MIN_DELIVERY_ATTEMPTS = 5
MAX_DELIVERY_ATTEMPTS = 100
MAX_BACKOFF = 600.0
MAX_FILTER_BYTES = 256

# Publish limits documented for the service (docs/protocol.md#publish-limits; the official
# publisher's _SERVER_PUBLISH_MAX_BYTES is the same 10 * 1000 * 1000).
MAX_PUBLISH_REQUEST_BYTES = 10_000_000
MAX_MESSAGES_PER_PUBLISH = 1000
MAX_ATTRIBUTES = 100
MAX_ATTRIBUTE_KEY_BYTES = 256
MAX_ATTRIBUTE_VALUE_BYTES = 1024
MAX_ORDERING_KEY_BYTES = 1024
MAX_PULL_MESSAGES = 1000  # the service returns at most this many per Pull
# Message bytes per unary Pull response: clients other than the official ones keep
# gRPC's 4 MiB receive limit, and ~1 MiB is left for per-message framing (ack id,
# message id, publish time: < 300 bytes each, so < 300 KB for 1000 messages). The
# first message always goes, however large (the same rule as StreamingPull responses).
MAX_PULL_RESPONSE_BYTES = 3 * 2**20


def _seconds(value: float) -> str:
    return f"{value:g}s"


def out_of_bounds(field: str, passed: str, low: str, high: str) -> InvalidArgument:
    return InvalidArgument(
        f"The value for {field} is out of bounds. You passed {passed} in the request, "
        f"but the value must be between {low} and {high}."
    )


def ack_deadline(value: int) -> None:
    if not MIN_ACK_DEADLINE <= value <= MAX_ACK_DEADLINE:
        raise out_of_bounds(
            "ack_deadline_seconds", str(value), str(MIN_ACK_DEADLINE), str(MAX_ACK_DEADLINE)
        )


def modack_seconds(value: int) -> None:
    if value < 0:
        raise InvalidArgument(
            f"Ack deadline cannot be negative. You passed {value} for ack_deadline_seconds; "
            "use 0 to nack or a value up to 600."
        )
    if value > MAX_MODACK_SECONDS:
        raise out_of_bounds("ack_deadline_seconds", str(value), "0", str(MAX_MODACK_SECONDS))


def retention(field: str, value: float) -> None:
    if not MIN_RETENTION <= value <= MAX_RETENTION:
        raise out_of_bounds(
            field, _seconds(value), _seconds(MIN_RETENTION), _seconds(MAX_RETENTION)
        )


def expiration(policy: ExpirationPolicy, retention_seconds: float | None) -> None:
    """The ttl's minimum, and, when ``retention_seconds`` is given (a policy the caller
    set), that it is longer than the retention."""
    if policy.ttl is None:
        return
    if policy.ttl < MIN_EXPIRATION_TTL:
        raise InvalidArgument(
            f"The value for expiration_policy.ttl is too small. You passed "
            f"{_seconds(policy.ttl)} in the request, but the minimum value is "
            f"{_seconds(MIN_EXPIRATION_TTL)}."
        )
    if retention_seconds is not None and policy.ttl <= retention_seconds:
        raise InvalidArgument(
            f"The value for expiration_policy.ttl ({_seconds(policy.ttl)}) must be longer than "
            f"message_retention_duration ({_seconds(retention_seconds)})."
        )


def dead_letter(policy: DeadLetterPolicy) -> None:
    # OUT_OF_RANGE and these texts are what the emulator answers
    # (docs/protocol.md#validation-and-error-texts).
    attempts = policy.max_delivery_attempts
    if attempts < MIN_DELIVERY_ATTEMPTS:
        raise OutOfRange(
            f"The value for max_delivery_attempts is too small. You passed {attempts} in the "
            f"request, but the minimum value is {MIN_DELIVERY_ATTEMPTS}."
        )
    if attempts > MAX_DELIVERY_ATTEMPTS:
        raise OutOfRange(
            f"The value for max_delivery_attempts is too large. You passed {attempts} in the "
            f"request, but the maximum value is {MAX_DELIVERY_ATTEMPTS}."
        )


def retry(policy: RetryPolicy) -> None:
    for field, value in (
        ("minimum_backoff", policy.minimum_backoff),
        ("maximum_backoff", policy.maximum_backoff),
    ):
        if not 0 <= value <= MAX_BACKOFF:
            raise out_of_bounds(field, _seconds(value), "0s", _seconds(MAX_BACKOFF))
    if policy.maximum_backoff < policy.minimum_backoff:
        raise InvalidArgument(
            f"The value for maximum_backoff is too small. You passed "
            f"{_seconds(policy.maximum_backoff)} in the request, but the minimum value is "
            f"{_seconds(policy.minimum_backoff)}."
        )


def filter_length(expression: str) -> None:
    size = len(expression.encode())
    if size > MAX_FILTER_BYTES:
        raise InvalidArgument(
            f"The filter is {size} bytes long, but filters may be at most {MAX_FILTER_BYTES} bytes."
        )


def _utf8_len(text: str) -> int:
    return len(text.encode())


def publish(messages: Sequence[NewMessage], request_bytes: int) -> None:
    """Validate a whole PublishRequest; ``request_bytes`` is its encoded size."""
    if not messages:
        raise InvalidArgument("The publish request contains no messages.")
    if len(messages) > MAX_MESSAGES_PER_PUBLISH:
        raise InvalidArgument(
            f"The value for message_count is too large. You passed {len(messages)} in the "
            f"request, but the maximum value is {MAX_MESSAGES_PER_PUBLISH}."
        )
    if request_bytes > MAX_PUBLISH_REQUEST_BYTES:
        raise InvalidArgument(
            f"Request payload size exceeds the limit: {MAX_PUBLISH_REQUEST_BYTES} bytes "
            f"(this request is {request_bytes} bytes)."
        )
    keys = {message.ordering_key for message in messages}
    if len(keys) > 1:
        raise InvalidArgument(
            "In a single publish request, all messages must have no ordering key or they must "
            f"all have the same ordering key (found {len(keys)} different keys)."
        )
    for index, message in enumerate(messages):
        if not message.data and not message.attributes:
            raise InvalidArgument(
                "One or more messages in the publish request is empty. Each message must "
                f"contain either non-empty data, or at least one attribute (message {index})."
            )
        if _utf8_len(message.ordering_key) > MAX_ORDERING_KEY_BYTES:
            raise InvalidArgument(
                f"The ordering key of message {index} is {_utf8_len(message.ordering_key)} "
                f"bytes long; ordering keys may be at most {MAX_ORDERING_KEY_BYTES} bytes."
            )
        if len(message.attributes) > MAX_ATTRIBUTES:
            raise InvalidArgument(
                f"Message {index} has {len(message.attributes)} attributes; a message may "
                f"have at most {MAX_ATTRIBUTES}."
            )
        for key, value in message.attributes.items():
            if not key:
                raise InvalidArgument(f"Message {index} has an attribute with an empty key.")
            # "goog" keys are reserved (docs/protocol.md#publish-limits), but
            # the official clients themselves send "googclient_" keys when tracing is on.
            if key.startswith("goog") and not key.startswith("googclient_"):
                raise InvalidArgument(
                    f"The attribute key {key!r} of message {index} is reserved: keys must not "
                    "start with 'goog'."
                )
            if _utf8_len(key) > MAX_ATTRIBUTE_KEY_BYTES:
                raise InvalidArgument(
                    f"The attribute key {key[:32]!r}... of message {index} is "
                    f"{_utf8_len(key)} bytes long; keys may be at most "
                    f"{MAX_ATTRIBUTE_KEY_BYTES} bytes."
                )
            if _utf8_len(value) > MAX_ATTRIBUTE_VALUE_BYTES:
                raise InvalidArgument(
                    f"The value of attribute {key!r} of message {index} is {_utf8_len(value)} "
                    f"bytes long; values may be at most {MAX_ATTRIBUTE_VALUE_BYTES} bytes."
                )


def pull_max_messages(value: int) -> None:
    if value <= 0:
        raise InvalidArgument(
            f"max_messages must be greater than 0 (you passed {value}); it is required."
        )


def stream_ack_deadline(value: int) -> None:
    if not MIN_ACK_DEADLINE <= value <= MAX_ACK_DEADLINE:
        raise InvalidArgument(
            f"stream_ack_deadline_seconds must be between {MIN_ACK_DEADLINE} and "
            f"{MAX_ACK_DEADLINE} seconds (you passed {value})."
        )
