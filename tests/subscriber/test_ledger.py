"""The ack ledger's decisions (``Acker``): retry delays, what a unary answer settles, and
the unary retry loop driven on a FakeClock (a 600 s deadline in a few loop turns)."""

from __future__ import annotations

import random

import pytest

from eoclient._clock import FakeClock
from eoclient.subscriber.ack_results import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TEMPORARY_FAILURE,
    AcknowledgeStatus,
)
from eoclient.subscriber.acker import Acker, AckRequest, Operation
from eoclient.subscriber.settings import AckRetrySettings

from .fake_transport import ACKNOWLEDGE, FakeTransport, eod_ack_failure, rpc_error

SUB = "projects/p/subscriptions/s"


class NoJitter(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return a


def ledger(retry: AckRetrySettings | None = None, **kwargs: object) -> Acker:
    return Acker(SUB, FakeTransport(), retry or AckRetrySettings(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attempt", "elapsed", "expected"),
    [
        (1, 0.0, 0.1),
        (2, 0.3, 0.2),
        (5, 3.0, 1.6),
        (20, 100.0, 10.0),  # capped at max_backoff
        (3, 599.9, 0.4),
        (3, 600.0, None),  # the deadline has passed: give up
    ],
)
def test_retry_delay_table(attempt: int, elapsed: float, expected: float | None) -> None:
    delay = ledger().retry_delay(attempt, elapsed, NoJitter())
    assert delay == (pytest.approx(expected) if expected is not None else None)


def test_retry_jitter_is_at_most_one_initial_backoff() -> None:
    acker = ledger(AckRetrySettings(initial_backoff=0.5, max_backoff=4, deadline=60))
    rng = random.Random(7)
    delays = [acker.retry_delay(3, 1.0, rng) for _ in range(200)]
    assert all(d is not None and 2.0 <= d <= 2.5 for d in delays)


@pytest.mark.parametrize(
    ("ambiguous", "error", "expected"),
    [
        (False, None, AcknowledgeStatus.SUCCESS),
        (False, "invalid", AcknowledgeStatus.INVALID_ACK_ID),
        # An earlier attempt may have been applied: never a wrong INVALID_ACK_ID.
        (True, "invalid", AcknowledgeStatus.OTHER),
        (False, "denied", AcknowledgeStatus.PERMISSION_DENIED),
        (False, "unavailable", None),  # retried
        (False, "transient", None),
    ],
)
def test_what_a_unary_answer_settles(
    ambiguous: bool, error: str | None, expected: AcknowledgeStatus | None
) -> None:
    acker = ledger()
    request = AckRequest("a", Operation.ACK, 0, ambiguous=ambiguous)
    remaining = {"a": request}
    errors = {
        None: None,
        "invalid": eod_ack_failure({"a": PERMANENT_FAILURE_INVALID_ACK_ID}),
        "transient": eod_ack_failure({"a": TEMPORARY_FAILURE}),
        "denied": rpc_error("PERMISSION_DENIED"),
        "unavailable": rpc_error("UNAVAILABLE"),
    }
    reasons: dict[str, str] = {}
    acker.apply_unary_answer(Operation.ACK, remaining, errors[error], reasons)
    if expected is None:
        assert remaining == {"a": request}
        assert request.result is None
        # A failed whole call may have been applied: the ack becomes ambiguous.
        assert request.ambiguous is (error == "unavailable")
    else:
        assert remaining == {}
        assert request.result is not None
        assert request.result.status is expected


async def test_unary_retries_wait_on_the_clock_and_give_up_at_the_deadline() -> None:
    clock = FakeClock()
    transport = FakeTransport()
    transport.on_acknowledge = lambda call: rpc_error("UNAVAILABLE", "down")
    acker = Acker(SUB, transport, AckRetrySettings(), clock=clock, rng=NoJitter())  # type: ignore[arg-type]
    request = AckRequest("a", Operation.ACK, 0)
    start = clock.now()
    await acker.send_unary([request])  # no real waiting: the fake clock jumps
    assert request.result is not None
    assert request.result.status is AcknowledgeStatus.OTHER
    assert "600 s retry deadline" in request.result.info
    assert clock.now() - start >= 600
    calls = transport.calls(ACKNOWLEDGE)
    # 0.1, 0.2, ..., 6.4 s, then 10 s each until 600 s: about 66 attempts, not thousands.
    assert 50 <= len(calls) <= 80
    assert acker.idle()
