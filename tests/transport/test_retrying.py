"""The one retry loop of the publisher and the admin calls, on a fake clock."""

from __future__ import annotations

import math
import random

import pytest

from eoclient._clock import FakeClock
from eoclient._retrying import (
    DEFAULT,
    RetrySettings,
    backoff_delay,
    call_with_retry,
    check_timeout,
    retry_delay,
)
from eoclient.errors import NotFound, RpcError, SizeLimitExceeded, Unavailable

UNAVAILABLE = frozenset({"UNAVAILABLE", "RESOURCE_EXHAUSTED"})


class Server:
    """Fails the first ``failures`` attempts with ``error``; records each deadline."""

    def __init__(self, clock: FakeClock, failures: int, error: RpcError, took: float = 0.0):
        self.clock = clock
        self.failures = failures
        self.error = error
        self.took = took
        self.deadlines: list[float | None] = []

    async def attempt(self, seconds: float | None) -> str:
        self.deadlines.append(seconds)
        self.clock.advance(self.took)
        if len(self.deadlines) <= self.failures:
            raise self.error
        return "answer"


async def run(
    server: Server,
    backoff: RetrySettings | None,
    timeout: float | None,
    retries: list[tuple[int, float]] | None = None,
) -> str:
    return await call_with_retry(
        server.attempt,
        backoff=backoff,
        codes=UNAVAILABLE,
        timeout=timeout,
        now=server.clock.now,
        sleep=server.clock.sleep,
        rng=random.Random(7),
        on_retry=None if retries is None else lambda n, _, d: retries.append((n, d)),
    )


async def test_retries_until_an_answer_telling_each_retry() -> None:
    server = Server(FakeClock(), failures=3, error=Unavailable("down"))
    retries: list[tuple[int, float]] = []
    assert await run(server, RetrySettings(), None, retries) == "answer"
    assert [n for n, _ in retries] == [1, 2, 3]
    assert server.deadlines == [None] * 4


async def test_no_attempt_starts_after_the_retry_deadline() -> None:
    clock = FakeClock()
    server = Server(clock, failures=10**6, error=Unavailable("down"))
    started = clock.now()
    with pytest.raises(Unavailable, match="down"):
        await run(server, RetrySettings(deadline=10.0), None)
    assert clock.now() - started < 10.0
    assert len(server.deadlines) > 5


async def test_the_timeout_is_the_budget_of_all_attempts() -> None:
    clock = FakeClock()
    server = Server(clock, failures=10**6, error=Unavailable("down"), took=1.0)
    with pytest.raises(Unavailable):
        await run(server, RetrySettings(deadline=math.inf), timeout=5.0)
    first, *later = server.deadlines
    assert first == 5.0
    assert all(d is not None and 0 < d < 5.0 for d in later)
    assert later == sorted(later, reverse=True)  # each attempt gets what remains


async def test_a_wait_that_ends_past_the_budget_sends_no_attempt() -> None:
    """A backoff due to end within the budget, woken late (a busy event loop), past it:
    the last error, not an attempt with no time left (DEADLINE_EXCEEDED)."""
    clock = FakeClock()
    server = Server(clock, failures=10**6, error=Unavailable("down"))

    async def late_sleep(seconds: float) -> None:
        await clock.sleep(seconds + 5.0)

    with pytest.raises(Unavailable, match="down"):
        await call_with_retry(
            server.attempt,
            backoff=RetrySettings(deadline=math.inf),
            codes=UNAVAILABLE,
            timeout=1.0,
            now=clock.now,
            sleep=late_sleep,
            rng=random.Random(7),
        )
    assert server.deadlines == [1.0]


async def test_other_codes_size_limits_and_no_retry_end_at_once() -> None:
    for error, backoff in [
        (NotFound("gone"), RetrySettings()),
        (SizeLimitExceeded("Received message larger than max (9 vs. 4)"), RetrySettings()),
        (Unavailable("down"), None),
    ]:
        server = Server(FakeClock(), failures=1, error=error)
        with pytest.raises(type(error)):
            await run(server, backoff, None)
        assert len(server.deadlines) == 1


class TopJitter(random.Random):
    """Always draws the top of the range."""

    def uniform(self, a: float, b: float) -> float:
        return b


def test_backoff_grows_to_its_cap_with_full_jitter() -> None:
    """The official clients' truncated exponential backoff: a draw from 0 to a bound that
    grows by ``multiplier`` up to ``max_backoff``."""
    settings = RetrySettings(initial_backoff=0.1, max_backoff=2.0, multiplier=2.0)
    bounds = [backoff_delay(settings, attempt, TopJitter()) for attempt in range(1, 12)]
    assert bounds == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, *[2.0] * 6])
    rng = random.Random(1)
    for attempt, bound in enumerate(bounds, start=1):
        draws = [backoff_delay(settings, attempt, rng) for _ in range(50)]
        assert all(0.0 <= d <= bound for d in draws)
        assert min(draws) < bound / 4  # the whole range is drawn from
        assert max(draws) > bound * 3 / 4


@pytest.mark.parametrize(
    ("elapsed", "budget", "expected"),
    [(0.0, math.inf, 0.4), (59.0, math.inf, 0.4), (59.6, math.inf, None), (1.0, 1.2, None)],
)
def test_retry_delay_gives_up_before_a_wait_past_the_deadline_or_budget(
    elapsed: float, budget: float, expected: float | None
) -> None:
    settings = RetrySettings(initial_backoff=0.1, max_backoff=2.0, multiplier=2.0, deadline=60)
    delay = retry_delay(settings, 3, elapsed, TopJitter(), budget=budget)
    assert delay == (None if expected is None else pytest.approx(expected))


def test_settings_are_checked() -> None:
    assert RetrySettings(codes=["UNAVAILABLE"]).codes == frozenset({"UNAVAILABLE"})
    with pytest.raises(ValueError, match="'UNAVAILBLE' is not a gRPC status name"):
        RetrySettings(codes={"UNAVAILBLE"})
    with pytest.raises(ValueError, match="a set of status names, got the string"):
        RetrySettings(codes="UNAVAILABLE")
    with pytest.raises(ValueError, match=r"RetrySettings\.max_backoff must be >= initial"):
        RetrySettings(initial_backoff=2.0, max_backoff=1.0)
    with pytest.raises(ValueError, match=r"RetrySettings\.deadline must be >= 0"):
        RetrySettings(deadline=-1)
    assert check_timeout(None) is None
    assert check_timeout(2) == 2.0
    with pytest.raises(ValueError, match="> 0"):
        check_timeout(float("nan"))
    with pytest.raises(TypeError, match="number of seconds"):
        check_timeout(True)
    assert repr(DEFAULT) == "DEFAULT"
