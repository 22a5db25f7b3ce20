"""Exactly-once ack results: wire response → per-ack-id outcome
(docs/architecture.md#exactly-once-results-are-classified-in-one-function).

Two pure, total functions, one per way the server reports on acks and modacks:

* :func:`classify_unary` for a unary ``Acknowledge`` / ``ModifyAckDeadline`` call
  (its gRPC status and ``google.rpc.ErrorInfo``; docs/protocol.md#exactly-once-error-details), with
  :func:`classify_unary_error` as the adapter for an :class:`~eoclient.errors.RpcError`;
* :func:`classify_confirmation` for ``StreamingPullResponse.acknowledge_confirmation`` /
  ``modify_ack_deadline_confirmation`` (docs/protocol.md#streamingpull-confirmations).

They decide; they resolve nothing. The caller resolves futures with
:attr:`AckOutcome.final` and resends :attr:`AckOutcome.retry` with backoff
(``AckRetrySettings``) until the retry deadline, after which an id still unresolved
becomes :data:`AcknowledgeStatus.OTHER`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from eoclient.errors import RpcError, is_retryable

__all__ = [
    "EXACTLY_ONCE_ACKID_FAILURE",
    "PERMANENT_FAILURE_INVALID_ACK_ID",
    "TEMPORARY_FAILURE",
    "TRANSIENT_FAILURE_PREFIX",
    "UNORDERED_ACK_ID",
    "AckIdResults",
    "AckOutcome",
    "AckResult",
    "AcknowledgeStatus",
    "classify_confirmation",
    "classify_unary",
    "classify_unary_error",
]

# ErrorInfo.reason of the per-ack-id failure response; its metadata maps each failed ack id
# to a failure string (docs/protocol.md#exactly-once-error-details).
EXACTLY_ONCE_ACKID_FAILURE = "EXACTLY_ONCE_ACKID_FAILURE"
# Metadata values: every "TRANSIENT_…" value is retryable (known ones:
# TRANSIENT_FAILURE_UNORDERED_ACK_ID, TRANSIENT_FAILURE_OTHER); of the permanent ones only the
# invalid-ack-id one has a status of its own, the rest (PERMANENT_FAILURE_OTHER) are OTHER.
TRANSIENT_FAILURE_PREFIX = "TRANSIENT_"
# ErrorInfo entry (not an ack id) of eoclient's server when it lists only some failed ids.
UNLISTED_FAILURES = "unlisted-failed-ack-ids"
PERMANENT_FAILURE_INVALID_ACK_ID = "PERMANENT_FAILURE_INVALID_ACK_ID"
# Retry reasons for the stream confirmations: the same strings the unary metadata would carry
# for the same condition (docs/protocol.md#streamingpull-confirmations gives the mapping), so logs
# read alike either way.
UNORDERED_ACK_ID = "TRANSIENT_FAILURE_UNORDERED_ACK_ID"
TEMPORARY_FAILURE = "TRANSIENT_FAILURE_OTHER"


class AcknowledgeStatus(enum.Enum):
    """Final result of an ack, nack or modack under exactly-once delivery.

    The same five buckets as the official Python (``subscriber.exceptions``) and Go
    clients (docs/protocol.md#exactly-once-result-mapping), with Python's numbering.
    """

    SUCCESS = 1
    """The server applied it. For an ack: the message will not be redelivered."""
    PERMISSION_DENIED = 2
    """The caller may not ack on this subscription."""
    FAILED_PRECONDITION = 3
    """The subscription is in a state that refuses it (e.g. detached)."""
    INVALID_ACK_ID = 4
    """The ack id is stale, expired, superseded by a newer delivery, or already acked."""
    OTHER = 5
    """Anything else, including transient failures that outlived the retry deadline."""


@dataclass(frozen=True, slots=True)
class AckResult:
    """A final result for one ack id.

    Attributes:
        status: the bucket.
        info: why, for anything but SUCCESS: the ErrorInfo metadata value
            (e.g. ``"PERMANENT_FAILURE_OTHER"``) or ``"CODE: message"``; ``""`` for SUCCESS.
    """

    status: AcknowledgeStatus
    info: str = ""


_SUCCESS = AckResult(AcknowledgeStatus.SUCCESS)


class AckIdResults(dict[str, AckResult]):
    """The result of each distinct ack id of a bulk settlement
    (:meth:`SubscriberClient.acknowledge`, :meth:`SubscriberClient.modify_ack_deadline`),
    by ack id.

    Attributes:
        failed: only the ids whose result is not SUCCESS, with their results: what a
            caller settling thousands of ids at once looks at, without a step per id
            that succeeded.
    """

    __slots__ = ("failed",)

    def __init__(self) -> None:
        super().__init__()
        self.failed: dict[str, AckResult] = {}

    def __repr__(self) -> str:
        return f"<AckIdResults of {len(self)} ack ids, {len(self.failed)} failed>"


@dataclass(frozen=True, slots=True)
class AckOutcome:
    """What one server answer means for the ack ids it covers.

    Attributes:
        final: ack id → final result; resolve these now.
        retry: ack id → transient reason; resend these with backoff. The reason is
            what to report (as OTHER) if the retry deadline passes.

    An id appears in at most one of the two. :func:`classify_unary` puts every
    input id in exactly one; :func:`classify_confirmation` may leave ids out.
    """

    final: Mapping[str, AckResult] = field(default_factory=dict)
    retry: Mapping[str, str] = field(default_factory=dict)


def classify_unary(
    ack_ids: Iterable[str],
    *,
    code: str | None,
    message: str = "",
    error_info_reason: str = "",
    error_info: Mapping[str, str] | None = None,
    exactly_once: bool,
) -> AckOutcome:
    """Classify the result of one unary Acknowledge / ModifyAckDeadline call.

    Args:
        ack_ids: the ids sent in the request (duplicates collapse into one entry).
        code: the gRPC status name (``"INVALID_ARGUMENT"``), or ``None`` / ``"OK"``
            when the call succeeded.
        message: the status message, quoted in OTHER results.
        error_info_reason: ``reason`` of the first ``google.rpc.ErrorInfo`` detail, or ``""``.
        error_info: ``metadata`` of that ErrorInfo (ack id → failure string), or ``None``.
        exactly_once: whether the subscription has exactly-once delivery enabled
            (``SubscriptionProperties.exactly_once_delivery_enabled``).

    Returns:
        Every input id in exactly one of ``final`` / ``retry``. Never raises.

    Rules, per ack id, first match wins:

    1. Call succeeded → SUCCESS.
    2. Exactly-once off → SUCCESS whatever happened: acks are best effort and the
       server does not report on them (docs/protocol.md#exactly-once-result-mapping, both official
       clients).
    3. The id is in the ErrorInfo metadata (whatever the reason, like Python, which
       reads the first detail's metadata without checking it):
       ``TRANSIENT_…`` → retry; ``PERMANENT_FAILURE_INVALID_ACK_ID`` → INVALID_ACK_ID;
       any other value → OTHER(value).
    4. The id is not in the metadata, but the response is an
       ``EXACTLY_ONCE_ACKID_FAILURE`` with non-empty metadata → **SUCCESS**: the server
       lists exactly the ids that failed and applied the rest
       (docs/protocol.md#exactly-once-error-details, "partial success", measured on the emulator).
       The official Python and Go clients report these ids as OTHER, i.e. claim an applied ack
       failed; Java and google-cloud-rust report SUCCESS, and so do we
       (docs/protocol.md#exactly-once-result-mapping).
    5. No per-id information: a retryable status (``errors.is_retryable``: DEADLINE_EXCEEDED,
       RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNAVAILABLE, UNKNOWN) → retry; PERMISSION_DENIED
       and FAILED_PRECONDITION → the status of that name; anything else → OTHER("CODE:
       message"), e.g. the emulator's plain INVALID_ARGUMENT "Invalid ack id (ack_id=…)" for
       a malformed id (docs/protocol.md#validation-and-error-texts), NOT_FOUND for a deleted
       subscription, or a RESOURCE_EXHAUSTED whose message names a gRPC size limit (permanent:
       errors.py).
    """
    ids = dict.fromkeys(ack_ids)  # ordered de-duplication
    if code is None or code == "OK" or not exactly_once:
        return AckOutcome(final=dict.fromkeys(ids, _SUCCESS))

    metadata = error_info or {}
    # A listing cut short to fit in a trailer counts the failed ids it leaves out: then an
    # unlisted id may have failed too (docs/protocol.md#ack-failures-that-do-not-fit-in-a-trailer).
    partial_success = (
        error_info_reason == EXACTLY_ONCE_ACKID_FAILURE
        and bool(metadata)
        and UNLISTED_FAILURES not in metadata
    )
    described = f"{code}: {message}" if message else code
    unlisted: AckResult | str  # a str means "retry, for this reason"
    if partial_success:
        unlisted = _SUCCESS
    elif is_retryable(code, message):
        # Whole-request failures worth retrying: the five of Python's
        # _EXACTLY_ONCE_DELIVERY_TEMPORARY_RETRY_ERRORS and Go's processResults
        # (docs/protocol.md#status-codes-and-retryability) plus UNKNOWN, less a RESOURCE_EXHAUSTED
        # that names a gRPC size limit (permanent) — errors.py's table, read from there, not
        # repeated.
        unlisted = described
    elif code == "PERMISSION_DENIED":
        unlisted = AckResult(AcknowledgeStatus.PERMISSION_DENIED, described)
    elif code == "FAILED_PRECONDITION":
        unlisted = AckResult(AcknowledgeStatus.FAILED_PRECONDITION, described)
    else:
        unlisted = AckResult(AcknowledgeStatus.OTHER, described)

    final: dict[str, AckResult] = {}
    retry: dict[str, str] = {}
    for ack_id in ids:
        value = metadata.get(ack_id)
        if value is None:
            if isinstance(unlisted, str):
                retry[ack_id] = unlisted
            else:
                final[ack_id] = unlisted
        elif value.startswith(TRANSIENT_FAILURE_PREFIX):
            retry[ack_id] = value
        elif value == PERMANENT_FAILURE_INVALID_ACK_ID:
            final[ack_id] = AckResult(AcknowledgeStatus.INVALID_ACK_ID, value)
        else:
            final[ack_id] = AckResult(AcknowledgeStatus.OTHER, value)
    return AckOutcome(final=final, retry=retry)


def classify_unary_error(
    ack_ids: Iterable[str], error: RpcError | None, *, exactly_once: bool
) -> AckOutcome:
    """:func:`classify_unary` for a call that returned (``None``) or raised ``error``."""
    if error is None:
        return classify_unary(ack_ids, code=None, exactly_once=exactly_once)
    return classify_unary(
        ack_ids,
        code=error.code,
        message=error.message,
        error_info_reason=error.reason,
        error_info=error.error_info,
        exactly_once=exactly_once,
    )


def classify_confirmation(
    ack_ids: Iterable[str],
    *,
    confirmed: Iterable[str] = (),
    invalid: Iterable[str] = (),
    unordered: Iterable[str] = (),
    temporary_failed: Iterable[str] = (),
) -> AckOutcome:
    """Classify a StreamingPull acknowledge / modify-ack-deadline confirmation.

    Args:
        ack_ids: the ids the caller is waiting on.
        confirmed: ``ack_ids`` of the confirmation → SUCCESS.
        invalid: ``invalid_ack_ids`` ("malformed or whose acknowledgment deadline has
            expired", proto comment) → INVALID_ACK_ID.
        unordered: ``unordered_ack_ids`` (AcknowledgeConfirmation only; ordering + EOD
            acked out of order, which the server calls a temporary error) → retry.
        temporary_failed: ``temporary_failed_ack_ids`` → retry.

    Returns:
        Only the ids of ``ack_ids`` the confirmation mentions. Confirmations are "not
        guaranteed to be populated" (proto comment), so for the others the caller
        keeps waiting or falls back to a unary call. Ids the confirmation mentions
        that are not in ``ack_ids`` are ignored. Never raises.

    An id listed more than once (a server bug) gets the least favourable listing:
    invalid over retry over confirmed, so an ack is never reported applied while
    the server also said it was not.
    """
    wanted = dict.fromkeys(ack_ids)
    final: dict[str, AckResult] = {}
    retry: dict[str, str] = {}
    for ack_id in confirmed:
        if ack_id in wanted:
            final[ack_id] = _SUCCESS
    for ids, reason in ((temporary_failed, TEMPORARY_FAILURE), (unordered, UNORDERED_ACK_ID)):
        for ack_id in ids:
            if ack_id in wanted:
                final.pop(ack_id, None)
                retry[ack_id] = reason
    for ack_id in invalid:
        if ack_id in wanted:
            retry.pop(ack_id, None)
            final[ack_id] = AckResult(AcknowledgeStatus.INVALID_ACK_ID, "invalid_ack_ids")
    return AckOutcome(final=final, retry=retry)
