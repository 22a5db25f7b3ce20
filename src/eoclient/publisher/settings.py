"""Publisher settings, grouped by concern (docs/architecture.md#settings-are-frozen-dataclasses).

Every class is a frozen dataclass that validates itself in ``__post_init__`` and
raises :class:`ValueError` naming the field, the value and the allowed range.
All durations are in **seconds** (``float``); all sizes in **bytes**.

Defaults follow the official Python publisher, which agrees with Go's
``DefaultPublishSettings`` except where noted (docs/protocol.md#publisher-batching,
docs/protocol.md#publisher-flow-control, docs/protocol.md#publish-retries).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from eoclient._retrying import DEFAULT, check_timeout
from eoclient.publisher.validation import MAX_PUBLISH_REQUEST_BYTES, MAX_PUBLISH_REQUEST_MESSAGES

__all__ = [
    "RETRYABLE_PUBLISH_CODES",
    "BatchSettings",
    "CallOptions",
    "LimitExceededBehavior",
    "PublishFlowControl",
    "PublishRetrySettings",
    "call_options",
]

# The status codes the official GAPIC publish retry retries
# (docs/protocol.md#status-codes-and-retryability). CANCELLED is among them although
# errors.Cancelled is not marked retryable in general: for Publish, a cancelled attempt
# (e.g. a server-side stream reset) is safe to resend because the publisher owns no
# server state.
RETRYABLE_PUBLISH_CODES: frozenset[str] = frozenset(
    {
        "ABORTED",
        "CANCELLED",
        "DEADLINE_EXCEEDED",
        "INTERNAL",
        "RESOURCE_EXHAUSTED",
        "UNAVAILABLE",
        "UNKNOWN",
    }
)


def _check_int(owner: str, field: str, value: object) -> None:
    # bool is an int subclass; True as a message count is certainly a mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{owner}.{field} must be an int, got {value!r}")


def _check_int_range(owner: str, field: str, value: int, low: int, high: int) -> None:
    _check_int(owner, field, value)
    if not (low <= value <= high):
        raise ValueError(f"{owner}.{field} must be between {low} and {high}, got {value!r}")


@dataclass(frozen=True, slots=True)
class BatchSettings:
    """How published messages are grouped into ``PublishRequest``\\ s.

    Messages with the same topic and ordering key are collected into one batch; a
    batch is sent as one ``PublishRequest`` when the first of these happens:

    * it holds ``max_messages`` messages;
    * the next message would take its encoded request size above ``max_bytes``
      (the batch is sent without it, and the message starts the next batch);
    * ``max_latency`` seconds have passed since its first message was added.

    Attributes:
        max_messages: messages per request, 1..1000. Default 100 (Python
            ``max_messages``, Go ``CountThreshold``). The upper bound is the server's
            limit of 1000 messages per PublishRequest (Go ``MaxPublishRequestCount``;
            the quotas page, as quoted in google-cloud-python#2774).
        max_bytes: encoded size of the whole ``PublishRequest`` (topic field included,
            as Python's ``Batch.size``), 1..10,000,000. Default 1,000,000 (Python
            ``max_bytes``, Go ``ByteThreshold``). The upper bound is the server's
            request limit (Python ``_SERVER_PUBLISH_MAX_BYTES``, Go
            ``MaxPublishRequestBytes``). Python silently caps larger values with
            ``min()``; eoclient rejects them, because a setting that does not do what it
            says is a bug waiting to be found. A single message larger than
            ``max_bytes`` (but within the server limit) is sent alone, as Python does.
        max_latency: seconds a batch may wait for more messages, counted from its
            first message; >= 0. ``0`` = the batch is due as soon as it has a message
            (only messages published without yielding to the event loop in between
            share a request); ``math.inf`` = send only when full or flushed. Default
            0.01 s (Python ``max_latency``, Go ``DelayThreshold``).
    """

    max_messages: int = 100
    max_bytes: int = 1_000_000
    max_latency: float = 0.01

    def __post_init__(self) -> None:
        _check_int_range(
            "BatchSettings", "max_messages", self.max_messages, 1, MAX_PUBLISH_REQUEST_MESSAGES
        )
        _check_int_range("BatchSettings", "max_bytes", self.max_bytes, 1, MAX_PUBLISH_REQUEST_BYTES)
        # Written as "not (>= 0)" so that NaN, which compares False to everything, fails.
        if not (self.max_latency >= 0):
            raise ValueError(
                "BatchSettings.max_latency must be >= 0 seconds (0 = send at once, "
                f"math.inf = only when full), got {self.max_latency!r}"
            )


class LimitExceededBehavior(enum.Enum):
    """What ``publish`` does when a message would exceed :class:`PublishFlowControl`.

    Same three values as Python's ``types.LimitExceededBehavior`` and Go's
    ``FlowControlSettings.LimitExceededBehavior`` (docs/protocol.md#publisher-flow-control).
    """

    BLOCK = "block"
    """Wait (asynchronously) until enough earlier messages are done; waiters are admitted
    first in first out. A message that alone exceeds ``max_bytes`` raises
    :class:`~eoclient.errors.FlowControlLimitError` instead of waiting forever."""

    ERROR = "error"
    """Raise :class:`~eoclient.errors.FlowControlLimitError` at once."""

    IGNORE = "ignore"
    """No flow control: every message is accepted (outstanding totals are still counted,
    for statistics)."""


@dataclass(frozen=True, slots=True)
class PublishFlowControl:
    """Limits on messages published but not yet resolved (sent and answered, or failed).

    A message counts from the moment ``publish`` accepts it until its future resolves.
    Its size is its encoded ``PubsubMessage`` size
    (:func:`eoclient.publisher.validation.encoded_message_size`), as Python's
    ``FlowController`` counts ``message._pb.ByteSize()``.

    Attributes:
        max_messages: at most this many outstanding messages; ``0`` = unlimited.
            Default 1000 (Python ``message_limit``, Go ``MaxOutstandingMessages``):
            ten full default batches.
        max_bytes: at most this many outstanding bytes; ``0`` = unlimited. Default
            10,000,000 (Python ``byte_limit``; Go is unlimited): ten full default
            batches, and exactly one maximal ``PublishRequest``, so any message the
            server can accept also passes flow control under ``BLOCK``.
        behavior: see :class:`LimitExceededBehavior`. Default ``IGNORE``, as both
            official clients, so that code ported from them keeps its behaviour and
            ``publish`` never waits unless asked to.

    ``0`` means unlimited for consistency with the subscriber's ``FlowControl``;
    negative values are rejected rather than treated as unlimited (Go uses -1):
    they are almost always a bug.
    """

    max_messages: int = 1000
    max_bytes: int = MAX_PUBLISH_REQUEST_BYTES
    behavior: LimitExceededBehavior = LimitExceededBehavior.IGNORE

    def __post_init__(self) -> None:
        for field, value in (("max_messages", self.max_messages), ("max_bytes", self.max_bytes)):
            _check_int("PublishFlowControl", field, value)
            if value < 0:
                raise ValueError(
                    f"PublishFlowControl.{field} must be >= 0 (0 = unlimited), got {value!r}"
                )
        if not isinstance(self.behavior, LimitExceededBehavior):
            raise ValueError(
                "PublishFlowControl.behavior must be a LimitExceededBehavior "
                f"(BLOCK, ERROR or IGNORE), got {self.behavior!r}"
            )


@dataclass(frozen=True, slots=True)
class PublishRetrySettings:
    """Retry of a ``Publish`` RPC that failed with a code in :data:`RETRYABLE_PUBLISH_CODES`.

    Delays grow from ``initial_backoff`` by ``multiplier`` up to ``max_backoff`` (the
    shell adds jitter); retrying stops once ``deadline`` seconds have passed since the
    first attempt, and the batch's futures then fail with the last error.

    Defaults are the official GAPIC publish retry (docs/protocol.md#publish-retries): 0.1 s initial,
    ×4, capped at 60 s, 600 s total, each attempt limited to 60 s
    (``ConstantTimeout(60)``; Go ``PublishSettings.Timeout`` is also 60 s).

    With ordering keys, a batch that finally fails pauses its key (see
    :mod:`eoclient.publisher.sequencer`). Python therefore forces the deadline to
    2**32 s when ordering is enabled (python-pubsub#1134); pass
    ``deadline=math.inf`` for the same effect.

    Attributes:
        initial_backoff: first delay, seconds; finite and > 0.
        max_backoff: cap of any single delay, seconds; >= initial_backoff.
        multiplier: growth factor per attempt; >= 1.
        deadline: total time to keep retrying, seconds, from the first attempt;
            >= 0, where ``0`` = never retry and ``math.inf`` = retry forever.
        attempt_timeout: limit of each single attempt, seconds; > 0 (``math.inf`` =
            no limit).
    """

    initial_backoff: float = 0.1
    max_backoff: float = 60.0
    multiplier: float = 4.0
    deadline: float = 600.0
    attempt_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not (0 < self.initial_backoff < math.inf):
            raise ValueError(
                "PublishRetrySettings.initial_backoff must be a finite number of seconds "
                f"> 0, got {self.initial_backoff!r}"
            )
        if not (self.max_backoff >= self.initial_backoff):
            raise ValueError(
                "PublishRetrySettings.max_backoff must be >= initial_backoff "
                f"({self.initial_backoff!r}) seconds, got {self.max_backoff!r}"
            )
        if not (self.multiplier >= 1):
            raise ValueError(
                f"PublishRetrySettings.multiplier must be >= 1, got {self.multiplier!r}"
            )
        if not (self.deadline >= 0):
            raise ValueError(
                "PublishRetrySettings.deadline must be >= 0 seconds (0 = never retry, "
                f"math.inf = forever), got {self.deadline!r}"
            )
        if not (self.attempt_timeout > 0):
            raise ValueError(
                "PublishRetrySettings.attempt_timeout must be > 0 seconds "
                f"(math.inf = no limit), got {self.attempt_timeout!r}"
            )


@dataclass(frozen=True, slots=True)
class CallOptions:
    """What a batch's ``Publish`` is sent with: the ``retry`` and ``timeout`` its messages
    were published with (``retry=None``: one attempt; ``timeout=None``: no budget but the
    retry deadline). Messages with different options never share a batch (``batcher.py``).
    """

    retry: PublishRetrySettings | None
    timeout: float | None


def call_options(retry: object, timeout: object, default: CallOptions) -> CallOptions:
    """The options of one ``publish(retry=..., timeout=...)``; ``default`` is the client's.

    Raises:
        TypeError / ValueError: ``retry`` is not a ``PublishRetrySettings``, ``DEFAULT`` or
            ``None``, or ``timeout`` is not a number of seconds > 0 or ``None``.
    """
    if retry is DEFAULT and timeout is None:
        return default  # the common case: one shared object
    if retry is DEFAULT:
        retry = default.retry
    elif retry is not None and not isinstance(retry, PublishRetrySettings):
        raise TypeError(
            f"retry must be a PublishRetrySettings or None (one attempt), got {retry!r} "
            "(publish's ordering_key, retry and timeout are parameters, not message "
            "attributes)"
        )
    return CallOptions(retry, check_timeout(timeout))
