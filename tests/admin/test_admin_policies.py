"""AdminClient's Pulsar-style policy methods round trip against the in-process reference
server (FakeClock): typed results, removals, client-side refusals, server refusals as
``RpcError`` subclasses, and against Google's emulator an ``Unimplemented`` that says
what is missing. Also the delayed-delivery attribute helpers (``eoclient.delayed_delivery``).
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator

import pytest

from eoclient import PublisherClient
from eoclient._clock import FakeClock
from eoclient.admin import (
    AdminClient,
    BacklogQuota,
    BacklogQuotaAction,
    RetentionPolicy,
    SeekOutcome,
    SkipOutcome,
    SubscriptionPolicies,
    SubscriptionPolicyCounters,
    TopicPolicies,
    TopicPolicyCounters,
)
from eoclient.delayed_delivery import (
    DELIVER_AFTER_ATTRIBUTE,
    DELIVER_AT_ATTRIBUTE,
    deliver_after,
    deliver_at,
)
from eoclient.errors import InvalidArgument, NotFound, Unimplemented
from eoclient.server_stub.core import policies as core_policies
from eoclient.server_stub.server import ReferenceServer

SECOND = datetime.timedelta(seconds=1)


@pytest.fixture
async def admin(reference: ReferenceServer) -> AsyncIterator[AdminClient]:
    async with AdminClient(reference.address) as client:
        yield client


async def names(admin: AdminClient, *, exactly_once: bool = False) -> tuple[str, str]:
    project = f"pol-{uuid.uuid4().hex[:8]}"
    topic = (await admin.create_topic(f"projects/{project}/topics/orders")).name
    sub = await admin.create_subscription(
        f"projects/{project}/subscriptions/workers",
        topic,
        enable_exactly_once_delivery=exactly_once,
    )
    return topic, sub.name


def at(clock: FakeClock, offset: float = 0.0) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(clock.now() + offset, datetime.UTC)


# ================================================================ topic policies


async def test_topic_policies_set_read_and_remove_one_at_a_time(admin: AdminClient) -> None:
    topic, _ = await names(admin)
    assert await admin.get_topic_policies(topic) == TopicPolicies(topic)

    got = await admin.set_topic_retention(topic, time=3 * 3600 * SECOND, size_bytes=None)
    assert got.retention == RetentionPolicy(time=3 * 3600 * SECOND, size_bytes=None)
    got = await admin.set_topic_backlog_quota(
        topic,
        limit_bytes=2 * 2**30,
        limit_age=3600 * SECOND,
        action=BacklogQuotaAction.CONSUMER_BACKLOG_EVICTION,
    )
    got = await admin.set_topic_message_ttl(topic, 120 * SECOND)
    assert got == TopicPolicies(
        topic,
        retention=RetentionPolicy(3 * 3600 * SECOND, None),
        backlog_quota=BacklogQuota(
            2 * 2**30, 3600 * SECOND, BacklogQuotaAction.CONSUMER_BACKLOG_EVICTION
        ),
        message_ttl=120 * SECOND,
    )
    assert await admin.get_topic_policies(topic) == got

    assert (await admin.remove_topic_retention(topic)).retention is None
    assert (await admin.remove_topic_message_ttl(topic)).message_ttl is None
    remaining = await admin.remove_topic_backlog_quota(topic)
    assert remaining == TopicPolicies(topic)

    infinite = await admin.set_topic_retention(topic, time=None, size_bytes=None)
    assert infinite.retention == RetentionPolicy(None, None)
    sized = await admin.set_topic_retention(topic, time=None, size_bytes=10 * 2**30)
    assert sized.retention == RetentionPolicy(None, 10 * 2**30)
    rounded = await admin.set_topic_retention(
        topic, time=datetime.timedelta(milliseconds=1500), size_bytes=None
    )
    assert rounded.retention == RetentionPolicy(2 * SECOND, None)  # whole seconds, up


async def test_invalid_policies_are_refused_by_the_server_or_before_sending(
    admin: AdminClient,
) -> None:
    topic, _ = await names(admin)
    with pytest.raises(InvalidArgument, match="set both limits"):
        await admin.set_topic_retention(topic, time=datetime.timedelta(0), size_bytes=1024)
    with pytest.raises(InvalidArgument, match="set both limits"):
        await admin.set_topic_retention(topic, time=SECOND, size_bytes=0)
    with pytest.raises(InvalidArgument, match="a size limit, an age limit or both"):
        await admin.set_topic_backlog_quota(topic)
    with pytest.raises(InvalidArgument, match="message_ttl must be > 0"):
        await admin.set_topic_message_ttl(topic, datetime.timedelta(0))
    with pytest.raises(ValueError, match="time must be >= 0"):
        await admin.set_topic_retention(topic, time=-SECOND, size_bytes=None)
    with pytest.raises(ValueError, match="size_bytes must be >= 0"):
        await admin.set_topic_retention(topic, time=None, size_bytes=-1)
    with pytest.raises(TypeError, match="timedelta"):
        await admin.set_topic_message_ttl(topic, 120)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a valid BacklogQuotaAction"):
        await admin.set_topic_backlog_quota(topic, limit_bytes=1, action="hold")  # type: ignore[arg-type]
    assert await admin.get_topic_policies(topic) == TopicPolicies(topic)
    with pytest.raises(NotFound):
        await admin.get_topic_policies("projects/nope/topics/missing")


# ================================================================ subscriptions


async def test_subscription_ttl_and_the_ttl_in_effect(admin: AdminClient) -> None:
    topic, sub = await names(admin)
    assert await admin.get_subscription_policies(sub) == SubscriptionPolicies(sub)
    await admin.set_topic_message_ttl(topic, 600 * SECOND)
    assert await admin.get_subscription_policies(sub) == SubscriptionPolicies(
        sub, None, 600 * SECOND
    )
    own = await admin.set_subscription_message_ttl(sub, 60 * SECOND)
    assert own == SubscriptionPolicies(sub, 60 * SECOND, 60 * SECOND)
    back = await admin.remove_subscription_message_ttl(sub)
    assert back == SubscriptionPolicies(sub, None, 600 * SECOND)


# ================================================================ skip, counters, seek


async def test_skip_messages_counters_and_seek_outcome(
    admin: AdminClient, reference: ReferenceServer, clock: FakeClock
) -> None:
    topic, sub = await names(admin)
    async with PublisherClient(reference.address) as publisher:
        first = await publisher.publish(topic, b"poison")
        delayed = await publisher.publish(topic, b"later", **deliver_after(60 * SECOND))
        await publisher.publish(topic, b"fine")

    outcomes = await admin.skip_messages(sub, [first, first, "123456"])
    assert outcomes == {first: SkipOutcome.SKIPPED, "123456": SkipOutcome.NOT_FOUND}
    assert await admin.skip_messages(sub, first) == {first: SkipOutcome.ALREADY_ACKNOWLEDGED}
    counters = await admin.get_subscription_policy_counters(sub)
    assert counters == SubscriptionPolicyCounters(
        sub,
        skipped=1,
        delayed_pending=1,
        backlog_messages=2,
        backlog_bytes=len(b"later") + len(b"fine") + len(DELIVER_AFTER_ATTRIBUTE) + len("60s"),
        oldest_unacked_publish_time=at(clock),
    )
    assert await admin.skip_messages(sub, [delayed]) == {delayed: SkipOutcome.SKIPPED}
    assert (await admin.get_subscription_policy_counters(sub)).delayed_pending == 0
    assert await admin.get_topic_policy_counters(topic) == TopicPolicyCounters(topic)

    await admin.set_topic_retention(topic, time=3600 * SECOND, size_bytes=None)
    async with PublisherClient(reference.address) as publisher:
        await publisher.publish(topic, b"retained")
    retained = await admin.get_topic_policy_counters(topic)
    assert (retained.retained_messages, retained.oldest_retained_publish_time) == (1, at(clock))

    outcome = await admin.seek_with_outcome(sub, time=at(clock, -3600))
    assert outcome == SeekOutcome(replayable_from=at(clock), complete=False)
    assert await admin.seek_with_outcome(sub, time=at(clock)) == SeekOutcome(at(clock), True)
    with pytest.raises(ValueError, match="exactly one"):
        await admin.seek_with_outcome(sub)
    with pytest.raises(ValueError, match="at least one message id"):
        await admin.skip_messages(sub, [])
    with pytest.raises(NotFound):
        await admin.skip_messages("projects/nope/subscriptions/missing", ["1"])


# ================================================================ delayed delivery


def test_the_delay_attributes_are_the_brokers() -> None:
    assert DELIVER_AT_ATTRIBUTE == core_policies.DELIVER_AT_ATTRIBUTE
    assert DELIVER_AFTER_ATTRIBUTE == core_policies.DELIVER_AFTER_ATTRIBUTE


@pytest.mark.parametrize(
    ("delay", "text"),
    [
        (datetime.timedelta(0), "0s"),
        (90 * SECOND, "90s"),
        (datetime.timedelta(seconds=1, milliseconds=500), "1.5s"),
        (datetime.timedelta(microseconds=1), "0.000001s"),
        (datetime.timedelta(days=2), "172800s"),
    ],
)
def test_deliver_after_writes_a_protobuf_json_duration(
    delay: datetime.timedelta, text: str
) -> None:
    assert deliver_after(delay) == {DELIVER_AFTER_ATTRIBUTE: text}
    publish_time = 1_000_000.0
    expected = publish_time + delay.total_seconds()
    assert core_policies.deliver_at(deliver_after(delay), publish_time) in (0.0, expected)


def test_deliver_at_writes_rfc3339_in_utc() -> None:
    cet = datetime.timezone(datetime.timedelta(hours=1))
    when = datetime.datetime(2026, 11, 23, 19, 0, 0, 250000, tzinfo=cet)
    attributes = deliver_at(when)
    assert attributes == {DELIVER_AT_ATTRIBUTE: "2026-11-23T18:00:00.250000Z"}
    assert core_policies.deliver_at(attributes, when.timestamp() - 10) == when.timestamp()


def test_delay_helpers_refuse_what_the_broker_would() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        deliver_at(datetime.datetime(2026, 1, 1))
    with pytest.raises(ValueError, match=">= 0"):
        deliver_after(-SECOND)
    with pytest.raises(TypeError):
        deliver_after(5)  # type: ignore[arg-type]


# ================================================================ elsewhere


@pytest.mark.emulator
async def test_the_emulator_says_it_lacks_the_extension(emulator: str) -> None:
    async with AdminClient(emulator) as admin:
        with pytest.raises(Unimplemented, match=r"needs eoclient's reference server"):
            await admin.get_topic_policies("projects/p/topics/whatever")


async def test_concurrent_updates_of_different_policies_do_not_lose_each_other(
    admin: AdminClient,
) -> None:
    topic, _ = await names(admin)
    await asyncio.gather(
        admin.set_topic_retention(topic, time=None, size_bytes=None),
        admin.set_topic_message_ttl(topic, SECOND),
        admin.set_topic_backlog_quota(topic, limit_bytes=5),
    )
    got = await admin.get_topic_policies(topic)
    assert got.retention is not None
    assert got.message_ttl == SECOND
    assert got.backlog_quota == BacklogQuota(limit_bytes=5)
