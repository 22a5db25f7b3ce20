"""Unary ``pull``: retried as the official client's GAPIC configuration retries Pull, with a
per-call ``retry=`` and ``timeout=``, against the reference server's fault injection.

The client waits on a ``FakeClock``: a backoff takes one loop turn, and the retry deadline
and the budget are read on the same clock, so "gave up once the budget was spent" is a
statement about the fake time, not a timing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from eoclient import PublisherClient, SubscriberClient
from eoclient._clock import FakeClock
from eoclient.admin import AdminClient, RetrySettings
from eoclient.errors import DeadlineExceeded, InvalidArgument, Unavailable
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber.client import PULL_RETRY

pytestmark = pytest.mark.timeout(20)

TOPIC = "projects/p/topics/pulled"
SUBSCRIPTION = "projects/p/subscriptions/pulled"


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        async with AdminClient(server.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(SUBSCRIPTION, TOPIC)
        async with PublisherClient(server.address) as publisher:
            await publisher.publish(TOPIC, b"order 1")
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def client(srv: ReferenceServer, clock: FakeClock) -> AsyncIterator[SubscriberClient]:
    async with SubscriberClient(srv.address, clock=clock) as subscriber:
        yield subscriber


def test_the_default_is_the_gapic_configuration_of_pull() -> None:
    assert (PULL_RETRY.initial_backoff, PULL_RETRY.multiplier, PULL_RETRY.max_backoff) == (
        0.1,
        1.3,
        60.0,
    )
    assert PULL_RETRY.deadline == 60.0
    assert PULL_RETRY.codes == {"ABORTED", "INTERNAL", "UNAVAILABLE", "UNKNOWN"}


@pytest.mark.parametrize("code", ["UNAVAILABLE", "ABORTED", "INTERNAL", "UNKNOWN"])
async def test_transient_failures_are_retried_until_the_pull_succeeds(
    srv: ReferenceServer,
    client: SubscriberClient,
    caplog: pytest.LogCaptureFixture,
    code: str,
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.subscriber")
    srv.faults.fail("Pull", code, "the backend restarts", times=2)
    [message] = await client.pull(SUBSCRIPTION)
    assert message.data == b"order 1"
    assert (await message.ack_with_response()).name == "SUCCESS"
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Pull ")]
    assert len(retries) == 2
    assert SUBSCRIPTION in retries[0]
    assert "the backend restarts" in retries[0]


async def test_other_failures_are_not_retried(
    srv: ReferenceServer, client: SubscriberClient
) -> None:
    srv.faults.fail("Pull", "INVALID_ARGUMENT", "no", times=1)
    with pytest.raises(InvalidArgument):
        await client.pull(SUBSCRIPTION)
    # DEADLINE_EXCEEDED: the caller's budget ran out; GAPIC does not retry it either.
    srv.faults.fail("Pull", "DEADLINE_EXCEEDED", "slow", times=1)
    with pytest.raises(DeadlineExceeded):
        await client.pull(SUBSCRIPTION)
    assert len(await client.pull(SUBSCRIPTION)) == 1


async def test_retry_none_is_one_attempt_and_settings_choose_their_codes(
    srv: ReferenceServer, client: SubscriberClient
) -> None:
    srv.faults.fail("Pull", "UNAVAILABLE", "down", times=1)
    with pytest.raises(Unavailable, match="down"):
        await client.pull(SUBSCRIPTION, retry=None)
    srv.faults.fail("Pull", "DEADLINE_EXCEEDED", "slow", times=2)
    patient = RetrySettings(initial_backoff=0.5, deadline=10, codes={"DEADLINE_EXCEEDED"})
    assert len(await client.pull(SUBSCRIPTION, retry=patient)) == 1


async def test_the_timeout_is_the_whole_budget(
    srv: ReferenceServer, client: SubscriberClient, clock: FakeClock
) -> None:
    srv.faults.fail("Pull", "UNAVAILABLE", "still down", times=1000)
    started = clock.now()
    with pytest.raises(Unavailable, match="still down"):
        await client.pull(SUBSCRIPTION, timeout=5)
    # No attempt starts after the budget: the last backoff would have ended past 5 s.
    assert clock.now() - started <= 5
    started = clock.now()
    with pytest.raises(Unavailable):
        await client.pull(SUBSCRIPTION)  # the GAPIC retry deadline, 60 s
    assert 30 < clock.now() - started <= 60
    srv.faults.clear()


async def test_bad_retry_and_timeout_are_refused_clearly(client: SubscriberClient) -> None:
    with pytest.raises(TypeError, match="RetrySettings or None"):
        await client.pull(SUBSCRIPTION, retry=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be > 0"):
        await client.pull(SUBSCRIPTION, timeout=0)


async def test_pull_raw_is_retried_by_the_same_rules_on_the_clients_clock(
    srv: ReferenceServer, client: SubscriberClient, clock: FakeClock
) -> None:
    """``pull_raw`` waits and gives up as ``pull`` does: the fake clock moves only by the
    backoffs, and a budget spent on it ends the call."""
    started = clock.now()
    srv.faults.fail("Pull", "UNAVAILABLE", times=3)
    raw = await client.pull_raw(SUBSCRIPTION)
    assert b"order 1" in raw
    assert 0 < clock.now() - started < 60  # three waits on the fake clock, none for real
    srv.faults.fail("Pull", "UNAVAILABLE", times=-1)
    patient = RetrySettings(initial_backoff=1.0, multiplier=2.0, max_backoff=8.0, deadline=600)
    with pytest.raises(Unavailable):
        await client.pull_raw(SUBSCRIPTION, retry=patient, timeout=30)
    assert clock.now() - started < 60 + 30  # no wait past the 30 s budget
