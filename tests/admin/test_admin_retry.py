"""Admin calls retried as the official GAPIC configuration retries them, with per-call
``retry=`` and ``timeout=``, against the reference server's fault injection.

The clients wait on a ``FakeClock``: a backoff of seconds takes one loop turn, and the
retry deadline and the timeout are read on the same clock, so "gave up once the budget
was spent" is an exact statement about the fake time, not a timing.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from eoclient._clock import FakeClock
from eoclient.admin import (
    AdminClient,
    Policy,
    RetrySettings,
    subscription_path,
    topic_path,
)
from eoclient.admin.calls import RETRIED_CODES
from eoclient.errors import (
    Aborted,
    DeadlineExceeded,
    NotFound,
    Unavailable,
)
from eoclient.server_stub.server import ReferenceServer, run_server

pytestmark = pytest.mark.timeout(20)

TOPIC = topic_path("p", "retried")
SUBSCRIPTION = subscription_path("p", "retried")


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def admin(srv: ReferenceServer, clock: FakeClock) -> AsyncIterator[AdminClient]:
    async with AdminClient(srv.address, clock=clock) as client:
        yield client


def retries_logged(caplog: pytest.LogCaptureFixture, method: str) -> int:
    return sum(
        1
        for record in caplog.records
        if record.name == "eoclient.admin" and record.getMessage().startswith(method + " ")
    )


async def test_unavailable_is_retried_until_the_call_succeeds(
    srv: ReferenceServer, admin: AdminClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.admin")
    await admin.create_topic(TOPIC)
    srv.faults.fail("CreateSubscription", "UNAVAILABLE", "the backend restarts", times=2)
    subscription = await admin.create_subscription(SUBSCRIPTION, TOPIC)
    assert subscription.name == SUBSCRIPTION
    assert retries_logged(caplog, "CreateSubscription") == 2
    [record, _] = [r for r in caplog.records if r.getMessage().startswith("CreateSubscription")]
    assert "the backend restarts" in record.getMessage()
    assert SUBSCRIPTION in record.getMessage()


async def test_deadline_exceeded_is_retried_for_reads_only(
    srv: ReferenceServer, admin: AdminClient
) -> None:
    await admin.create_topic(TOPIC)
    srv.faults.fail("GetTopic", "DEADLINE_EXCEEDED", times=2)
    assert (await admin.get_topic(TOPIC)).name == TOPIC
    # A create that timed out may have happened: repeated, it would answer ALREADY_EXISTS
    # for the caller's own success. The caller decides.
    srv.faults.fail("CreateSubscription", "DEADLINE_EXCEEDED", "slow", times=1)
    with pytest.raises(DeadlineExceeded, match="slow"):
        await admin.create_subscription(SUBSCRIPTION, TOPIC)
    srv.faults.fail("UpdateTopic", "DEADLINE_EXCEEDED", times=1)  # sets a state: repeatable
    assert (await admin.update_topic(TOPIC, labels={"a": "b"})).labels == {"a": "b"}


async def test_the_gapic_codes_of_each_method(srv: ReferenceServer, admin: AdminClient) -> None:
    await admin.create_topic(TOPIC)
    srv.faults.fail("CreateSubscription", "ABORTED", times=1)  # GAPIC retries it here ...
    await admin.create_subscription(SUBSCRIPTION, TOPIC)
    srv.faults.fail("DeleteSubscription", "ABORTED", "conflict", times=1)  # ... not here
    with pytest.raises(Aborted, match="conflict"):
        await admin.delete_subscription(SUBSCRIPTION)
    srv.faults.fail("SetIamPolicy", "UNAVAILABLE", "no retry for IAM writes", times=1)
    with pytest.raises(Unavailable, match="no retry for IAM writes"):
        await admin.set_iam_policy(TOPIC, Policy())
    assert RETRIED_CODES["CreateTopic"] == {"UNAVAILABLE"}
    assert RETRIED_CODES["ListSubscriptions"] == {
        "ABORTED",
        "UNAVAILABLE",
        "UNKNOWN",
        "DEADLINE_EXCEEDED",
    }


async def test_a_paged_list_retries_each_page(srv: ReferenceServer, admin: AdminClient) -> None:
    for name in ("topic-a", "topic-b", "topic-c"):
        await admin.create_topic(topic_path("p", name))
    srv.faults.fail("ListTopics", "UNAVAILABLE", times=1)
    pages = [page async for page in admin.list_topics("p", page_size=2).pages()]
    assert [len(page) for page in pages] == [2, 1]


async def test_retries_stop_at_the_timeout_with_the_last_error(
    srv: ReferenceServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "eoclient.admin")
    srv.faults.fail("GetTopic", "UNAVAILABLE", "still down", times=-1)
    async with AdminClient(srv.address, clock=clock, timeout=60) as admin:
        started = clock.now()
        with pytest.raises(Unavailable, match="still down"):
            await admin.get_topic(TOPIC)
        by_default = clock.now() - started
        started = clock.now()
        with pytest.raises(Unavailable, match="still down"):
            await admin.get_topic(TOPIC, timeout=5)
        per_call = clock.now() - started
    assert 30 < by_default < 60  # the client's budget, not the Publisher service's 600 s
    assert 1 < per_call < 5
    gave_up = [r.getMessage() for r in caplog.records if "failed for good" in r.getMessage()]
    assert len(gave_up) == 2
    assert gave_up[0].startswith(f"GetTopic {TOPIC} failed for good after ")
    assert gave_up[0].endswith("attempts: UNAVAILABLE: still down")


async def test_a_per_call_retry_replaces_the_methods(
    srv: ReferenceServer, admin: AdminClient
) -> None:
    await admin.create_topic(TOPIC)
    srv.faults.fail("GetTopic", "NOT_FOUND", "not yet", times=2)
    with pytest.raises(NotFound, match="not yet"):
        await admin.get_topic(TOPIC)  # NOT_FOUND is no GAPIC retry code
    eventually = RetrySettings(initial_backoff=0.5, codes={"NOT_FOUND"})
    assert (await admin.get_topic(TOPIC, retry=eventually)).name == TOPIC
    srv.faults.fail("GetTopic", "UNAVAILABLE", "once", times=1)
    with pytest.raises(Unavailable, match="once"):
        await admin.get_topic(TOPIC, retry=None)
    with pytest.raises(TypeError, match="retry must be a RetrySettings"):
        await admin.get_topic(TOPIC, retry="forever")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be > 0"):
        await admin.get_topic(TOPIC, timeout=-1)


async def test_the_policy_extension_is_retried_too(
    srv: ReferenceServer, admin: AdminClient
) -> None:
    await admin.create_topic(TOPIC)
    srv.faults.fail("GetTopicPolicies", "UNAVAILABLE", times=2)
    assert (await admin.get_topic_policies(TOPIC)).topic == TOPIC


async def test_a_client_wide_retry(srv: ReferenceServer, clock: FakeClock) -> None:
    srv.faults.fail("GetTopic", "UNAVAILABLE", "down", times=-1)
    async with AdminClient(srv.address, clock=clock, retry=None) as admin:
        started = clock.now()
        with pytest.raises(Unavailable, match="down"):
            await admin.get_topic(TOPIC)  # at once: no retry for any call of this client
        assert clock.now() == started
        with pytest.raises(Unavailable):  # a call's own retry still wins
            await admin.get_topic(TOPIC, retry=RetrySettings(deadline=3))
        assert 1 < clock.now() - started < 3
    with pytest.raises(TypeError, match="retry must be a RetrySettings"):
        AdminClient(srv.address, retry=5)  # type: ignore[arg-type]
