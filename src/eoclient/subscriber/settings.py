"""Subscriber settings, grouped by concern (docs/architecture.md#settings-are-frozen-dataclasses).

Every class is a frozen dataclass that validates itself in ``__post_init__`` and
raises :class:`ValueError` naming the field, the value and the allowed range.
All durations are in **seconds** (``float``); all sizes in **bytes**.

Defaults follow the official clients unless a reason to differ is given next to
the field (docs/protocol.md#initial-streamingpull-request and the sections after it).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace

__all__ = [
    "MAX_ACK_DEADLINE",
    "MIN_ACK_DEADLINE",
    "AckRetrySettings",
    "FlowControl",
    "LeaseSettings",
    "ShutdownBehavior",
    "ShutdownOptions",
    "StreamSettings",
]

# Bounds of every ack deadline the server accepts: Subscription.ack_deadline_seconds and
# StreamingPullRequest.stream_ack_deadline_seconds are 10..600
# (docs/protocol.md#subscription-properties-and-defaults); the official clients clamp lease
# extensions to the same range (docs/protocol.md#ack-deadline-from-the-latency-histogram).
MIN_ACK_DEADLINE = 10
MAX_ACK_DEADLINE = 600


def _check_range(owner: str, field: str, value: float, low: float, high: float) -> None:
    """Raise ValueError unless ``low <= value <= high`` (NaN is always rejected)."""
    # Written as "not (in range)" so that NaN, which compares False to everything, fails.
    if not (low <= value <= high):
        raise ValueError(f"{owner}.{field} must be between {low} and {high}, got {value!r}")


def _check_int(owner: str, field: str, value: object) -> None:
    # bool is an int subclass; True as a message count is certainly a mistake.
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{owner}.{field} must be an int, got {value!r}")


@dataclass(frozen=True, slots=True)
class FlowControl:
    """Client-side flow control of messages handed to the application.

    A message counts from the moment it is handed to the application until it is
    acked, nacked, or dropped (e.g. released after ``LeaseSettings.max_lease``).
    Messages received beyond the limits are held in arrival order, never dropped.
    The same numbers are sent to the server as
    ``StreamingPullRequest.max_outstanding_messages`` / ``max_outstanding_bytes``
    (docs/protocol.md#subscriber-flow-control), as the official clients do.

    Attributes:
        max_messages: at most this many messages outstanding; ``0`` = unlimited.
            Default 1000, as Python and Go (docs/protocol.md#subscriber-flow-control).
        max_bytes: at most this many bytes of message data outstanding; ``0`` =
            unlimited. Default 100 MiB, as Python (Go uses 1 GB; 100 MiB keeps a
            single asyncio process's memory modest). One message larger than the
            limit is still handed out when nothing else is outstanding, otherwise it
            could never be delivered.

    ``0`` maps directly onto the wire, where ``<= 0`` means unlimited. Negative values
    are rejected rather than treated as unlimited: they are almost always a bug.
    """

    max_messages: int = 1000
    max_bytes: int = 100 * 2**20

    def __post_init__(self) -> None:
        for field, value in (("max_messages", self.max_messages), ("max_bytes", self.max_bytes)):
            _check_int("FlowControl", field, value)
            if value < 0:
                raise ValueError(f"FlowControl.{field} must be >= 0 (0 = unlimited), got {value!r}")


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    """How long messages are kept leased while the application works on them.

    Attributes:
        min_extension: floor of each lease extension, seconds; ``0`` = unset, else
            10..600. Unset with exactly-once delivery on, the floor is 60 s
            (docs/protocol.md#ack-deadline-from-the-latency-histogram; Go
            ``minDurationPerLeaseExtensionExactlyOnce``).
        max_extension: cap of each lease extension, seconds; ``0`` = unset, else
            10..600. Also bounds the stream ack deadline
            (docs/protocol.md#ack-deadline-from-the-latency-histogram).
        max_lease: total time a message is kept leased, seconds, counted from receipt.
            After it the client stops extending the lease and forgets the message
            **without** acking or nacking it; the server redelivers it once the last
            extension expires. Must be > 0; ``math.inf`` = never give up. Default 1 h,
            as Python ``max_lease_duration`` and Go ``MaxExtension``
            (docs/protocol.md#subscriber-flow-control).

    Values between 0 and 10 are rejected for the extensions: every ack deadline is
    clamped to 10..600 (the server's range), so 5 would silently mean 10.
    """

    min_extension: float = 0
    max_extension: float = 0
    max_lease: float = 3600

    def __post_init__(self) -> None:
        for field, value in (
            ("min_extension", self.min_extension),
            ("max_extension", self.max_extension),
        ):
            if value != 0 and not (MIN_ACK_DEADLINE <= value <= MAX_ACK_DEADLINE):
                raise ValueError(
                    f"LeaseSettings.{field} must be 0 (unset) or between {MIN_ACK_DEADLINE} "
                    f"and {MAX_ACK_DEADLINE} seconds, got {value!r}"
                )
        if self.min_extension and self.max_extension and self.min_extension > self.max_extension:
            raise ValueError(
                "LeaseSettings.min_extension must be <= max_extension when both are set, "
                f"got min_extension={self.min_extension!r} > max_extension={self.max_extension!r}"
            )
        if not self.max_lease > 0:  # also rejects NaN
            raise ValueError(
                f"LeaseSettings.max_lease must be > 0 seconds (math.inf = never), "
                f"got {self.max_lease!r}"
            )


@dataclass(frozen=True, slots=True)
class AckRetrySettings:
    """Retry of transient exactly-once ack / modack / nack failures.

    A request whose ack ids the classifier (:mod:`.ack_results`) marks as "retry"
    is resent with exponential backoff (the shell adds jitter) until each id gets a
    final result or ``deadline`` has passed since the first attempt; ids still
    unresolved then resolve as ``AcknowledgeStatus.OTHER``.

    Defaults: 0.1 s → 10 s, ×2, 600 s total. Go uses 1 s → 64 s with a 600 s total and
    Python 1 s → 600 s with no total (docs/protocol.md#exactly-once-retries). eoclient
    starts lower because the commonest transient failure, ``TRANSIENT_FAILURE_UNORDERED_ACK_ID``,
    clears as soon as the preceding ack of the key lands (milliseconds), and an
    ordered EOD subscriber waits on each ack; 0.1 s is also the GAPIC
    Acknowledge/ModifyAckDeadline retry's first delay. The 10 s cap is a
    sixth of the 60 s minimum EOD lease, so a retried modack gets several tries
    before the lease it protects expires; at one request per 10 s per batch the load
    is negligible. The 600 s total equals Go's ``exactlyOnceDeliveryRetryDeadline``
    and the longest ack deadline the server grants.

    Attributes:
        initial_backoff: first delay, seconds; > 0.
        max_backoff: cap of any single delay, seconds; >= initial_backoff.
        multiplier: growth factor per attempt; >= 1.
        deadline: total time to keep retrying, seconds, from the first attempt;
            >= 0, where ``0`` = never retry (transient failures resolve OTHER at once)
            and ``math.inf`` = retry until a final result (Python's behaviour).
    """

    initial_backoff: float = 0.1
    max_backoff: float = 10.0
    multiplier: float = 2.0
    deadline: float = 600.0

    def __post_init__(self) -> None:
        if not (0 < self.initial_backoff < math.inf):
            raise ValueError(
                "AckRetrySettings.initial_backoff must be a finite number of seconds > 0, "
                f"got {self.initial_backoff!r}"
            )
        _check_range(
            "AckRetrySettings", "max_backoff", self.max_backoff, self.initial_backoff, math.inf
        )
        _check_range("AckRetrySettings", "multiplier", self.multiplier, 1, math.inf)
        _check_range("AckRetrySettings", "deadline", self.deadline, 0, math.inf)


class ShutdownBehavior(enum.Enum):
    """What closing a subscriber does with messages your code still holds.

    Mirrors Go v2 ``ShutdownOptions.Behavior`` (docs/protocol.md#subscriber-shutdown).
    """

    WAIT_FOR_PROCESSING = "wait_for_processing"
    """Stop receiving, keep leases alive and wait for outstanding messages to be
    acked or nacked (up to ``ShutdownOptions.timeout``), then nack what is left.
    The default of :meth:`~eoclient.SubscriberClient.run`, whose handlers are still
    running when it stops."""

    NACK_IMMEDIATELY = "nack_immediately"
    """Stop receiving and nack every outstanding and held message at once; later
    acks of those messages resolve OTHER. The default of
    :meth:`~eoclient.SubscriberClient.subscribe`: once you leave its ``async with``,
    nothing is left that could settle a message you did not."""


@dataclass(frozen=True, slots=True)
class ShutdownOptions:
    """Shutdown policy as a value (docs/architecture.md#lifecycle-is-explicit).

    Attributes:
        behavior: see :class:`ShutdownBehavior`. ``None`` (the default) lets the way you
            receive decide: leaving ``subscribe()``'s stream nacks what you hold at once
            (``NACK_IMMEDIATELY``), ``run()`` waits for its handlers
            (``WAIT_FOR_PROCESSING``). Set it to wait when your loop hands messages to
            tasks of its own that settle them later.
        timeout: seconds to wait for outstanding messages when the behavior waits;
            ``None`` = wait forever, ``0`` = do not wait. Default 30 s rather than Go's
            "no timeout": a bound by default keeps ``aclose()`` finite
            (docs/architecture.md#lifecycle-is-explicit), and 30 s is the stop grace
            period process managers commonly give (Kubernetes' default
            ``terminationGracePeriodSeconds``); lower it if the process must finish
            other work within that window.
        flush_timeout: seconds the acks, nacks and modacks still unsent or unanswered at
            shutdown get to be sent and answered (retries included) before they are
            reported OTHER; >= 0. Default 10 s: one round trip takes milliseconds, so
            this bounds only a server that is down, and keeps ``aclose()`` finite.
        stream_close_timeout: seconds the server gets, after the client half-closes its
            stream, to send what it had in flight (confirmations, deliveries, which are
            nacked) and end the call; >= 0. Default 2 s: the reference server and
            Google's emulator do so within milliseconds; after it the stream is
            cancelled.
    """

    behavior: ShutdownBehavior | None = None
    timeout: float | None = 30.0
    flush_timeout: float = 10.0
    stream_close_timeout: float = 2.0

    def __post_init__(self) -> None:
        if self.behavior is not None and not isinstance(self.behavior, ShutdownBehavior):
            raise ValueError(
                "ShutdownOptions.behavior must be a ShutdownBehavior or None, "
                f"got {self.behavior!r}"
            )
        if self.timeout is not None:
            _check_range("ShutdownOptions", "timeout", self.timeout, 0, math.inf)
        _check_range("ShutdownOptions", "flush_timeout", self.flush_timeout, 0, math.inf)
        _check_range(
            "ShutdownOptions", "stream_close_timeout", self.stream_close_timeout, 0, math.inf
        )

    def _with_default_behavior(self, behavior: ShutdownBehavior) -> ShutdownOptions:
        """These options, with ``behavior`` where none was chosen."""
        return self if self.behavior is not None else replace(self, behavior=behavior)


@dataclass(frozen=True, slots=True)
class StreamSettings:
    """The StreamingPull stream itself.

    Attributes:
        stream_ack_deadline: ``StreamingPullRequest.stream_ack_deadline_seconds``, the
            deadline the server applies to messages delivered on the stream until the
            client modacks them; 10..600. Default 60 s, as Python and Go
            (docs/protocol.md#initial-streamingpull-request). A set ``LeaseSettings.max_extension``
            should take precedence, as in both official clients; that is the shell's choice.
        keepalive_interval: seconds between client pings (empty requests) on an idle
            stream; > 0. Default 30 s: the server closes streams idle for about 60 s,
            and Python, Go and the gRPC channel keepalive all use 30 s
            (docs/protocol.md#initial-streamingpull-request).
        reconnect_initial_backoff: first delay before reopening a broken stream,
            seconds; > 0. Default 0.1 s, the GAPIC StreamingPull setup retry's first
            delay (docs/protocol.md#stream-reconnection): the commonest break is the server's
            periodic close, which should be healed at once.
        reconnect_max_backoff: cap of the reopen delay, seconds; >= the initial one.
            Default 10 s: short against the 60 s stream ack deadline, so a stream that
            comes back can still extend the leases of messages already in hand.

    Reopen delays double each attempt (the multiplier of Go's ``gax.Backoff``).
    """

    stream_ack_deadline: float = 60.0
    keepalive_interval: float = 30.0
    reconnect_initial_backoff: float = 0.1
    reconnect_max_backoff: float = 10.0

    def __post_init__(self) -> None:
        _check_range(
            "StreamSettings",
            "stream_ack_deadline",
            self.stream_ack_deadline,
            MIN_ACK_DEADLINE,
            MAX_ACK_DEADLINE,
        )
        for field, value in (
            ("keepalive_interval", self.keepalive_interval),
            ("reconnect_initial_backoff", self.reconnect_initial_backoff),
        ):
            if not (0 < value < math.inf):
                raise ValueError(
                    f"StreamSettings.{field} must be a finite number of seconds > 0, got {value!r}"
                )
        _check_range(
            "StreamSettings",
            "reconnect_max_backoff",
            self.reconnect_max_backoff,
            self.reconnect_initial_backoff,
            math.inf,
        )
