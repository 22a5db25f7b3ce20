"""Broker core: the Pulsar-style policies (core/policies.py,
docs/protocol.md#broker-policy-extension), on a fake clock — skip by id, retention by time
and size, backlog quotas, message TTL, delayed delivery — each on both stores (conftest.py),
with the durable one restarted after."""

from __future__ import annotations

import datetime

import pytest

from eoclient.errors import InvalidArgument, ResourceExhausted
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.policies import (
    DELIVER_AFTER_ATTRIBUTE,
    DELIVER_AT_ATTRIBUTE,
    BacklogQuota,
    BacklogQuotaHeld,
    QuotaAction,
    RetentionPolicy,
    SkipOutcome,
    SubscriptionPolicies,
    TopicPolicies,
)

from .support import INVALID, SUB, TOPIC, Env, data

OTHER = "projects/p1/subscriptions/sub-b"
OTHER_TOPIC = "projects/p1/topics/elsewhere"
HOUR = 3600.0


@pytest.fixture
def env() -> Env:
    return Env()


def pull_all(env: Env, sub: str = SUB) -> list[str]:
    return data(env.pull(1000, sub=sub))


def drain(env: Env, sub: str = SUB) -> list[str]:
    """Pull and ack until nothing is deliverable now."""
    seen: list[str] = []
    while deliveries := env.pull(1000, sub=sub):
        seen += data(deliveries)
        env.ack(*(d.ack_id for d in deliveries), sub=sub)
    return seen


def set_policies(env: Env, **fields: object) -> None:
    env.broker.topics.set_policies(TOPIC, TopicPolicies(**fields))  # type: ignore[arg-type]


# ======================================================================= skip


def test_skip_acknowledges_waiting_and_leased_messages_here_only(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    env.subscribe(OTHER)
    a, b, _ = env.publish("a", "b", "c")
    [leased] = env.pull(1)  # a, leased
    outcomes = env.broker.publishing.skip(SUB, [a, b])
    assert outcomes == {a: SkipOutcome.SKIPPED, b: SkipOutcome.SKIPPED}
    assert env.ack(leased.ack_id).failures == {leased.ack_id: INVALID}  # its ack id is gone
    assert drain(env) == ["c"]
    assert drain(env, OTHER) == ["a", "b", "c"]  # other subscriptions are unaffected
    assert env.broker.counters(SUB)["skipped"] == 2
    assert env.broker.subscriptions.policy_counters(SUB).skipped == 2


def test_skip_outcomes_are_per_id_and_idempotent(env: Env) -> None:
    env.subscribe()
    a, b = env.publish("a", "b")
    env.ack(env.pull(1)[0].ack_id)  # a acknowledged by a subscriber
    outcomes = env.broker.publishing.skip(SUB, [a, b, b, "999999", "x1", "", "²", "1" * 40])
    assert outcomes == {
        a: SkipOutcome.ALREADY_ACKNOWLEDGED,
        b: SkipOutcome.SKIPPED,
        "999999": SkipOutcome.NOT_FOUND,
        "x1": SkipOutcome.NOT_FOUND,
        "": SkipOutcome.NOT_FOUND,
        "²": SkipOutcome.NOT_FOUND,
        "1" * 40: SkipOutcome.NOT_FOUND,
    }
    assert env.broker.publishing.skip(SUB, [b]) == {b: SkipOutcome.ALREADY_ACKNOWLEDGED}
    assert env.broker.backlog(SUB) == 0


def test_an_id_of_another_topic_is_not_found_not_acknowledged(env: Env) -> None:
    env.subscribe()
    [mine] = env.publish("mine")
    env.broker.topics.create(TopicConfig(OTHER_TOPIC))
    [theirs] = env.broker.publishing.publish(OTHER_TOPIC, [NewMessage(b"theirs")])
    env.ack(env.pull(1)[0].ack_id)
    assert env.broker.publishing.skip(SUB, [mine, theirs]) == {
        mine: SkipOutcome.ALREADY_ACKNOWLEDGED,
        theirs: SkipOutcome.NOT_FOUND,
    }
    # After a restart nothing tells them apart: what is not pending reads acknowledged.
    env.broker.publishing.restored(env.broker.publishing.last_seq)
    assert env.broker.publishing.skip(SUB, [theirs]) == {theirs: SkipOutcome.ALREADY_ACKNOWLEDGED}


def test_skipping_an_ordered_head_unblocks_the_next_ack(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True, enable_message_ordering=True)
    first, _ = env.publish("poison", "next", key="k")
    _, second = env.pull()
    assert env.ack(second.ack_id).failures  # out of order while the head is unacked
    env.broker.publishing.skip(SUB, [first])
    assert env.ack(second.ack_id).ok
    assert env.broker.backlog(SUB) == 0


def test_skipping_a_waiting_ordered_head_delivers_the_next(env: Env) -> None:
    env.subscribe(enable_message_ordering=True)
    [poison] = env.publish("poison", key="k")
    env.publish("next", key="k")
    head, follower = env.pull()
    env.nack(head.ack_id)  # the key rewinds: both wait, the poison first
    env.nack(follower.ack_id)
    env.broker.publishing.skip(SUB, [poison])
    assert pull_all(env) == ["next"]


def test_skip_reaches_messages_beyond_the_window(env: Env) -> None:
    env.subscribe()
    ids = env.publish(*(f"m{i}" for i in range(10)))  # on SQLite, most are cold
    assert env.broker.publishing.skip(SUB, [ids[8]]) == {ids[8]: SkipOutcome.SKIPPED}
    assert drain(env) == [f"m{i}" for i in range(10) if i != 8]


# ================================================================= retention


@pytest.mark.parametrize(
    ("time", "size", "valid"),
    [
        (-1, -1, True),  # infinite
        (-1, 1000, True),  # size-based
        (60, -1, True),  # time-based
        (0, 0, True),  # disabled
        (0, 1000, False),
        (60, 0, False),
        (60, 1000, True),  # either limit drops
        (-2, -1, False),
        (60, -5, False),
        (float("inf"), -1, False),
    ],
)
def test_retention_table(time: float, size: int, valid: bool) -> None:
    policy = RetentionPolicy(time, size)
    if valid:
        policy.validate()
    else:
        with pytest.raises(InvalidArgument, match="retention"):
            policy.validate()


def test_set_topic_policies_refuses_invalid_retention(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="set both limits"):
        set_policies(env, retention=RetentionPolicy(60, 0))
    assert env.broker.topics.policies(TOPIC) == TopicPolicies()


def test_retention_replays_acknowledged_messages_within_its_time(env: Env) -> None:
    env.subscribe()
    set_policies(env, retention=RetentionPolicy(HOUR, -1))
    env.publish("a", "b")
    assert drain(env) == ["a", "b"]
    env.advance(HOUR / 2)
    outcome = env.broker.snapshots.seek(SUB, time=0)
    assert drain(env) == ["a", "b"]
    assert outcome.replayable_from == env.clock.now() - HOUR / 2
    assert not outcome.complete  # time 0 is older than anything retained: says so
    env.advance(HOUR / 2)
    outcome = env.broker.snapshots.seek(SUB, time=0)
    assert drain(env) == []
    assert outcome.replayable_from is None


def test_retention_by_size_drops_the_oldest_first(env: Env) -> None:
    env.subscribe()
    set_policies(env, retention=RetentionPolicy(-1, 25))
    env.publish("aaaaaaaaaa", "bbbbbbbbbb", "cccccccccc")  # 10 bytes each
    drain(env)
    env.broker.snapshots.seek(SUB, time=0)
    assert drain(env) == ["bbbbbbbbbb", "cccccccccc"]
    counters = env.broker.topics.policy_counters(TOPIC)
    assert (counters.retained_messages, counters.retained_bytes) == (2, 20)


def test_retention_keeps_what_a_topic_published_before_its_subscription(env: Env) -> None:
    set_policies(env, retention=RetentionPolicy(-1, -1))
    env.publish("early")
    env.subscribe()  # created later: its backlog starts empty, as on the service
    assert pull_all(env) == []
    env.broker.snapshots.seek(SUB, time=0)
    assert pull_all(env) == ["early"]


def test_retention_and_retain_acked_messages_keep_a_message_while_either_does(env: Env) -> None:
    env.subscribe(retain_acked_messages=True, message_retention_duration=2 * HOUR)
    set_policies(env, retention=RetentionPolicy(HOUR, -1))
    env.publish("a")
    drain(env)
    env.advance(1.5 * HOUR)  # past the topic's retention, within the subscription's
    env.broker.snapshots.seek(SUB, time=0)
    assert drain(env) == ["a"]


def test_the_retention_cursor_is_never_seen_as_a_subscription(env: Env) -> None:
    env.subscribe()
    set_policies(env, retention=RetentionPolicy(-1, -1))
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == (SUB,)
    assert [s.config.name for s in env.broker.subscriptions.list("projects/p1", 0, "").items] == [
        SUB
    ]
    set_policies(env, retention=RetentionPolicy(0, 0))  # disabled: the cursor goes
    assert env.broker.topics.policy_counters(TOPIC).retained_messages == 0


def test_retention_filters_what_it_replays_by_the_subscription_filter(env: Env) -> None:
    set_policies(env, retention=RetentionPolicy(-1, -1))
    env.broker.publishing.publish(
        TOPIC, [NewMessage(b"red", {"colour": "red"}), NewMessage(b"blue", {"colour": "blue"})]
    )
    env.subscribe(filter='attributes.colour = "red"')
    env.broker.snapshots.seek(SUB, time=0)
    assert pull_all(env) == ["red"]


# ============================================================== backlog quota


@pytest.mark.parametrize(
    "quota",
    [
        BacklogQuota(),
        BacklogQuota(limit_bytes=0),
        BacklogQuota(limit_age=-1),
        BacklogQuota(limit_bytes=10, hold_timeout=601),
    ],
)
def test_invalid_quotas_are_refused(env: Env, quota: BacklogQuota) -> None:
    with pytest.raises(InvalidArgument, match="backlog quota"):
        set_policies(env, backlog_quota=quota)


def test_exception_quota_refuses_publishes_while_a_subscription_is_over(env: Env) -> None:
    env.subscribe()
    set_policies(env, backlog_quota=BacklogQuota(limit_bytes=3, action=QuotaAction.EXCEPTION))
    env.publish("aa", "bb")  # 4 bytes: over the limit from now on
    with pytest.raises(ResourceExhausted, match=f"Backlog quota exceeded on topic {TOPIC}"):
        env.publish("c")
    drain(env)
    env.publish("c")  # within the quota again
    assert env.broker.topics.policy_counters(TOPIC).refused_publishes == 1


def test_age_quota_counts_from_the_oldest_unacknowledged_message(env: Env) -> None:
    env.subscribe()
    set_policies(env, backlog_quota=BacklogQuota(limit_age=60, action=QuotaAction.EXCEPTION))
    env.publish("old")
    env.advance(61)
    with pytest.raises(ResourceExhausted, match="oldest message 61 s old, limit 60 s"):
        env.publish("new")
    drain(env)
    env.publish("new")


def test_hold_quota_asks_the_door_to_hold(env: Env) -> None:
    env.subscribe()
    quota = BacklogQuota(limit_bytes=1, action=QuotaAction.HOLD, hold_timeout=5)
    set_policies(env, backlog_quota=quota)
    env.publish("ab")
    with pytest.raises(BacklogQuotaHeld) as held:
        env.publish("c")
    assert held.value.hold_timeout == 5
    env.broker.publishing.note_held(TOPIC, admitted=False)
    counters = env.broker.topics.policy_counters(TOPIC)
    assert (counters.held_publishes, counters.held_then_refused) == (1, 1)


def test_eviction_acknowledges_the_oldest_of_the_laggard_only(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    env.subscribe(OTHER)
    quota = BacklogQuota(limit_bytes=1, action=QuotaAction.EVICTION)
    env.publish("a", "b")
    [leased] = env.pull(1)
    drain(env, OTHER)
    set_policies(env, backlog_quota=quota)
    env.publish("c", "d", "e")  # SUB holds a, b: over; checked before storing c, d, e
    # a (the oldest, leased) was evicted: its ack id is gone; b is within the limit.
    assert env.ack(leased.ack_id).failures == {leased.ack_id: INVALID}
    assert drain(env) == ["b", "c", "d", "e"]
    assert env.broker.subscriptions.policy_counters(SUB).evicted == 1
    assert env.broker.subscriptions.policy_counters(OTHER).evicted == 0


def test_eviction_keeps_the_newest_within_the_limit(env: Env) -> None:
    env.subscribe()
    env.publish("a", "b", "c", "d")
    set_policies(env, backlog_quota=BacklogQuota(limit_bytes=2, action=QuotaAction.EVICTION))
    env.publish("e")
    assert drain(env) == ["c", "d", "e"]
    assert env.broker.counters(SUB)["evicted"] == 2


def test_the_retention_cursor_is_not_held_to_the_quota(env: Env) -> None:
    env.subscribe()
    set_policies(
        env,
        retention=RetentionPolicy(-1, -1),
        backlog_quota=BacklogQuota(limit_bytes=5, action=QuotaAction.EXCEPTION),
    )
    for i in range(10):
        env.publish(f"m{i}")
        drain(env)  # the subscription keeps up; the cursor keeps everything


# ====================================================================== TTL


def test_topic_ttl_acknowledges_unacked_messages_leased_or_not(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    set_policies(env, message_ttl=30)
    env.publish("leased", "waiting")
    [leased] = env.pull(1)
    env.advance(30)
    assert env.ack(leased.ack_id).failures == {leased.ack_id: INVALID}
    assert pull_all(env) == []
    assert env.broker.counters(SUB)["expired_by_ttl"] == 2
    assert env.broker.backlog(SUB) == 0


def test_subscription_ttl_wins_over_the_topic_ttl(env: Env) -> None:
    env.subscribe()
    env.subscribe(OTHER)
    set_policies(env, message_ttl=100)
    env.broker.subscriptions.set_policies(SUB, SubscriptionPolicies(message_ttl=10))
    env.publish("a")
    env.advance(10)
    assert pull_all(env) == []
    assert pull_all(env, OTHER) == ["a"]


def test_ttl_acknowledged_messages_are_retained_when_the_subscription_retains(env: Env) -> None:
    env.subscribe(retain_acked_messages=True)
    env.broker.subscriptions.set_policies(SUB, SubscriptionPolicies(message_ttl=10))
    env.publish("a")
    env.advance(10)
    assert [m.data for m in env.broker.retained_acked(SUB)] == [b"a"]


def test_ttl_reaches_messages_beyond_the_window(env: Env) -> None:
    env.subscribe()
    env.publish(*(f"old{i}" for i in range(10)))
    env.advance(5)
    env.publish("new")
    env.broker.subscriptions.set_policies(SUB, SubscriptionPolicies(message_ttl=5))
    assert drain(env) == ["new"]
    assert env.broker.counters(SUB)["expired_by_ttl"] == 10


@pytest.mark.parametrize("ttl", [0, -1, float("inf")])
def test_invalid_ttls_are_refused(env: Env, ttl: float) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="message_ttl"):
        env.broker.subscriptions.set_policies(SUB, SubscriptionPolicies(message_ttl=ttl))


# ========================================================== delayed delivery


def delayed(env: Env, text: str, key: str = "", **attributes: str) -> str:
    [message_id] = env.broker.publishing.publish(
        TOPIC, [NewMessage(text.encode(), dict(attributes), ordering_key=key)]
    )
    return message_id


def test_deliver_after_holds_a_message_back_on_every_subscription(env: Env) -> None:
    env.subscribe()
    env.subscribe(OTHER)
    delayed(env, "later", **{DELIVER_AFTER_ATTRIBUTE: "30s"})
    env.publish("now")
    assert drain(env) == ["now"]
    assert env.broker.subscriptions.policy_counters(SUB).delayed_pending == 1
    due = env.clock.now() + 30
    env.advance(10)  # past the acked lease's (stale) wake-up
    assert env.broker.next_wakeup() == due  # the server's ticker wakes for it
    env.advance(19.9)
    assert pull_all(env) == []
    env.advance(0.1)
    assert pull_all(env) == ["later"]
    assert sorted(pull_all(env, OTHER)) == ["later", "now"]


def test_deliver_at_takes_an_rfc3339_time(env: Env) -> None:
    env.subscribe()
    at = datetime.datetime.fromtimestamp(env.clock.now() + 90, datetime.UTC).isoformat()
    delayed(env, "at", **{DELIVER_AT_ATTRIBUTE: at.replace("+00:00", "Z")})
    env.advance(89)
    assert pull_all(env) == []
    env.advance(1)
    assert pull_all(env) == ["at"]


def test_a_delay_in_the_past_delivers_at_once(env: Env) -> None:
    env.subscribe()
    delayed(env, "past", **{DELIVER_AT_ATTRIBUTE: "2000-01-01T00:00:00Z"})
    assert pull_all(env) == ["past"]


@pytest.mark.parametrize(
    ("attributes", "match"),
    [
        ({DELIVER_AFTER_ATTRIBUTE: "30"}, "is not a duration"),
        ({DELIVER_AFTER_ATTRIBUTE: "-3s"}, "is not a duration"),
        ({DELIVER_AFTER_ATTRIBUTE: "1e3s"}, "is not a duration"),
        ({DELIVER_AT_ATTRIBUTE: "tomorrow"}, "is not an RFC 3339 time"),
        ({DELIVER_AT_ATTRIBUTE: "2030-01-01T00:00:00"}, "with a zone"),
        ({DELIVER_AFTER_ATTRIBUTE: f"{32 * 86400}s"}, "more than 31 days"),
        ({DELIVER_AFTER_ATTRIBUTE: "1s", DELIVER_AT_ATTRIBUTE: "2030-01-01T00:00:00Z"}, "not both"),
    ],
)
def test_malformed_delays_are_refused_and_nothing_is_stored(
    env: Env, attributes: dict[str, str], match: str
) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match=match):
        env.broker.publishing.publish(TOPIC, [NewMessage(b"fine"), NewMessage(b"bad", attributes)])
    assert env.broker.backlog(SUB) == 0


def test_a_delayed_ordered_head_holds_its_key_only(env: Env) -> None:
    env.subscribe(enable_message_ordering=True, enable_exactly_once_delivery=True)
    delayed(env, "k1", key="k", **{DELIVER_AFTER_ATTRIBUTE: "10s"})
    delayed(env, "k2", key="k")
    delayed(env, "j1", key="j")
    assert drain(env) == ["j1"]
    env.advance(10)
    assert drain(env) == ["k1", "k2"]


def test_skipping_a_delayed_message_cancels_it(env: Env) -> None:
    env.subscribe()
    message_id = delayed(env, "cancelled", **{DELIVER_AFTER_ATTRIBUTE: "60s"})
    assert env.broker.publishing.skip(SUB, [message_id]) == {message_id: SkipOutcome.SKIPPED}
    env.advance(60)
    assert pull_all(env) == []
    assert env.broker.subscriptions.policy_counters(SUB).delayed_pending == 0


# ================================================================== counters


def test_policy_counters_describe_the_backlog(env: Env) -> None:
    env.subscribe()
    env.publish("ab", "cde")
    counters = env.broker.subscriptions.policy_counters(SUB)
    assert (counters.backlog_messages, counters.backlog_bytes) == (2, 5)
    assert counters.oldest_unacked_publish_time == env.clock.now()


def test_policies_of_a_topic_and_subscription_read_back(env: Env) -> None:
    env.subscribe()
    policies = TopicPolicies(
        retention=RetentionPolicy(HOUR, 10_000),
        backlog_quota=BacklogQuota(limit_bytes=1000, limit_age=60, action=QuotaAction.EVICTION),
        message_ttl=120,
    )
    assert env.broker.topics.set_policies(TOPIC, policies) == policies
    assert env.broker.topics.policies(TOPIC) == policies
    assert env.broker.subscriptions.policies(SUB) == SubscriptionPolicies()
    env.broker.topics.create(TopicConfig("projects/p1/topics/plain"))
    assert env.broker.topics.policies("projects/p1/topics/plain") == TopicPolicies()
    env.broker.subscriptions.create(SubscriptionConfig(OTHER, TOPIC))
