"""The SDK's one retry mechanism: which failures, how long to wait, when to give up.

Every retry of the SDK and the Spark connector waits what :func:`retry_delay` says and gives
up when it says so, on the clock and with the random source its owner was given
(docs/architecture.md#one-retry-mechanism):

* :func:`call_with_retry`, the loop around one unary call: the publisher's ``Publish``,
  every admin call, ``SubscriberClient.pull`` and ``pull_raw`` (and so the Spark
  connector's Pull calls);
* the ack ledger's unary Acknowledge / ModifyAckDeadline calls, whose retries go id by id
  (a call's answer settles some ids and leaves others to retry: ``subscriber/sender.py``),
  ``SubscriberClient.acknowledge`` / ``modify_ack_deadline`` among them (and so the Spark
  connector's acks and lease extensions);
* the subscriber's stream reconnects (``subscriber/receiver.py``), whose backoff starts
  over once a stream delivered something.

Delays are the official clients' truncated exponential backoff with full jitter
(``google.api_core.retry.exponential_sleep_generator``: a uniform draw between 0 and
``initial_backoff * multiplier ** (attempt - 1)``, that bound capped at ``max_backoff``).
For one unary call the rules are ``google.api_core.retry`` with the GAPIC settings of each
method, with two differences on purpose:

* a call's ``timeout`` is its whole time budget, retries included: each attempt is sent
  with the time that remains (``google.api_core.timeout.TimeToDeadlineTimeout``, which
  the GAPIC methods use, does the same) — but an attempt is never sent with a budget it
  has already spent (api_core then restarts the full timeout);
* no attempt starts after the retry deadline or the budget: a backoff that would end
  past either ends the call with the last error instead of sleeping first (as tenacity's
  ``stop_before_delay``).

What is retried is a set of canonical status names; a gRPC size limit never is (the same
request meets it again: errors.py, the classification table), nor anything that is not
an :class:`~eoclient.errors.RpcError` (cancellation, bugs).
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, Protocol, TypeVar

from eoclient.errors import RpcError, SizeLimitExceeded

__all__ = [
    "DEFAULT",
    "STATUS_NAMES",
    "Backoff",
    "Default",
    "RetrySettings",
    "backoff_delay",
    "call_with_retry",
    "check_timeout",
    "retry_delay",
]

T = TypeVar("T")


class Default(enum.Enum):
    """The type of :data:`DEFAULT`."""

    DEFAULT = "DEFAULT"

    def __repr__(self) -> str:
        return "DEFAULT"


DEFAULT: Final = Default.DEFAULT
"""A per-call ``retry=`` / ``timeout=`` not given: the client's setting applies (the
official clients' ``gapic_v1.method.DEFAULT``). ``None`` is a value of its own: no
retry, no deadline."""

# The canonical gRPC status names (google.rpc.Code), OK excepted.
STATUS_NAMES: frozenset[str] = frozenset(
    {
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    }
)


class Backoff(Protocol):
    """Delays that grow from ``initial_backoff`` by ``multiplier`` up to ``max_backoff``,
    and no new attempt once ``deadline`` seconds have passed since the first."""

    @property
    def initial_backoff(self) -> float: ...
    @property
    def max_backoff(self) -> float: ...
    @property
    def multiplier(self) -> float: ...
    @property
    def deadline(self) -> float: ...


@dataclass(frozen=True, slots=True)
class RetrySettings:
    """How a call is retried (an admin call's ``retry=``).

    Defaults are the official GAPIC settings of the admin methods: 0.1 s, ×1.3 per
    attempt, at most 60 s apart, for 60 s (the Publisher service's methods: 600 s).

    Attributes:
        initial_backoff: first delay, seconds; finite and > 0.
        max_backoff: cap of any single delay, seconds; >= initial_backoff.
        multiplier: growth factor per attempt; >= 1.
        deadline: stop retrying once this many seconds have passed since the first
            attempt; >= 0 (``0`` = never retry, ``math.inf`` = no limit but the call's
            ``timeout``).
        codes: the status names retried (e.g. ``{"UNAVAILABLE"}``; kept as a
            frozenset); ``None`` = the method's own set
            (``eoclient.admin.calls.RETRIED_CODES``).
    """

    initial_backoff: float = 0.1
    max_backoff: float = 60.0
    multiplier: float = 1.3
    deadline: float = 60.0
    codes: Collection[str] | None = None

    def __post_init__(self) -> None:
        check_backoff("RetrySettings", self)
        if self.codes is not None:
            if isinstance(self.codes, str):
                raise ValueError(
                    f"RetrySettings.codes must be a set of status names, got the string "
                    f"{self.codes!r} (write {{{self.codes!r}}})"
                )
            codes = frozenset(self.codes)
            unknown = sorted(code for code in codes if code not in STATUS_NAMES)
            if unknown:
                raise ValueError(
                    f"RetrySettings.codes: {', '.join(map(repr, unknown))} is not a gRPC "
                    f"status name (one of {', '.join(sorted(STATUS_NAMES))})"
                )
            object.__setattr__(self, "codes", codes)


def check_backoff(owner: str, settings: Backoff) -> None:
    """ValueError naming the field, for settings that cannot mean anything."""
    if not (0 < settings.initial_backoff < math.inf):
        raise ValueError(
            f"{owner}.initial_backoff must be a finite number of seconds > 0, "
            f"got {settings.initial_backoff!r}"
        )
    if not (settings.max_backoff >= settings.initial_backoff):
        raise ValueError(
            f"{owner}.max_backoff must be >= initial_backoff ({settings.initial_backoff!r}) "
            f"seconds, got {settings.max_backoff!r}"
        )
    if not (settings.multiplier >= 1):
        raise ValueError(f"{owner}.multiplier must be >= 1, got {settings.multiplier!r}")
    if not (settings.deadline >= 0):
        raise ValueError(
            f"{owner}.deadline must be >= 0 seconds (0 = never retry, math.inf = no "
            f"limit), got {settings.deadline!r}"
        )


def check_timeout(timeout: object, what: str = "timeout") -> float | None:
    """``timeout`` if it is a number of seconds > 0 or ``None``, else a clear error.

    A string is most likely an attribute meant for the message: ``retry`` and
    ``timeout`` are parameters of ``publish``, as in google-cloud-pubsub, so they
    cannot be attribute names.
    """
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise TypeError(
            f"{what} must be a number of seconds or None, got {timeout!r} (publish's "
            "ordering_key, retry and timeout are parameters, not message attributes)"
        )
    if not (timeout > 0):
        raise ValueError(f"{what} must be > 0 seconds (None: no deadline), got {timeout!r}")
    return float(timeout)


def backoff_delay(settings: Backoff, attempt: int, rng: random.Random) -> float:
    """The wait after failed attempt number ``attempt`` (1 = the first).

    A uniform draw from 0 to ``initial_backoff * multiplier ** (attempt - 1)``, that bound
    capped at ``max_backoff``: the official clients' full jitter
    (``google.api_core.retry.exponential_sleep_generator``), with the random source passed
    in. Full jitter spreads clients that failed together over the whole interval.
    """
    exponent = attempt - 1
    bound = settings.max_backoff
    if settings.multiplier == 1:
        bound = settings.initial_backoff
    elif exponent < math.log(settings.max_backoff / settings.initial_backoff, settings.multiplier):
        bound = settings.initial_backoff * settings.multiplier**exponent  # no overflow
    return rng.uniform(0, min(bound, settings.max_backoff))


def retry_delay(
    settings: Backoff,
    attempt: int,
    elapsed: float,
    rng: random.Random,
    *,
    budget: float = math.inf,
) -> float | None:
    """How long to wait before retrying after failed attempt number ``attempt``, or
    ``None``: give up.

    ``elapsed`` is the time since the first attempt started. No attempt starts once
    ``settings.deadline`` or ``budget`` (a call's whole timeout) has passed: a wait that
    would end past either gives up at once instead of sleeping first (tenacity's
    ``stop_before_delay``; api_core gives up the same way for its deadline).
    """
    delay = backoff_delay(settings, attempt, rng)
    if elapsed + delay >= min(settings.deadline, budget):
        return None
    return delay


def retried(error: BaseException, codes: Iterable[str]) -> bool:
    """Whether ``error`` is a status in ``codes`` that sending again can change."""
    return (
        isinstance(error, RpcError)
        and error.code in codes
        and not isinstance(error, SizeLimitExceeded)
    )


async def call_with_retry(
    attempt: Callable[[float | None], Awaitable[T]],
    *,
    backoff: Backoff | None,
    codes: frozenset[str],
    timeout: float | None,
    now: Callable[[], float],
    sleep: Callable[[float], Awaitable[None]],
    rng: random.Random,
    attempt_timeout: float | None = None,
    on_retry: Callable[[int, RpcError, float], None] | None = None,
) -> T:
    """``await attempt(seconds)`` until it returns, or fails for good.

    Args:
        attempt: makes one call with a deadline of ``seconds`` (``None``: none).
        backoff: delays and retry deadline; ``None`` = a single attempt.
        codes: status names retried.
        timeout: the whole call's budget, seconds, retries included (``None``: only
            the retry deadline bounds it).
        now / sleep: the clock the budget and the delays are measured on.
        attempt_timeout: a cap on each attempt's deadline (the publisher's 60 s).
        on_retry: told ``(attempt number, its error, the delay)`` before each wait.

    Raises the last error: the server's own, never a wrapper.
    """
    started = now()
    budget = math.inf if timeout is None else timeout
    number = 0
    last: RpcError | None = None
    while True:
        number += 1
        remaining = budget - (now() - started)
        if last is not None and remaining <= 0:
            # The wait was due to end within the budget but ended past it (a busy loop
            # wakes late): an attempt now would have no time at all, and would fail with
            # DEADLINE_EXCEEDED in place of the error that made the caller wait.
            raise last
        seconds = min(remaining, math.inf if attempt_timeout is None else attempt_timeout)
        try:
            return await attempt(None if math.isinf(seconds) else max(seconds, 0.0))
        except RpcError as error:
            if backoff is None or not retried(error, codes):
                raise
            delay = retry_delay(backoff, number, now() - started, rng, budget=budget)
            if delay is None:
                raise
            if on_retry is not None:
                on_retry(number, error, delay)
            last = error
            await sleep(delay)
