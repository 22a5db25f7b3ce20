"""Broker core: UpdateSubscription / UpdateTopic with field masks — every mutable property
takes effect, immutable ones are refused with a clear INVALID_ARGUMENT, a failed update
changes nothing — plus the retry policy's backoff after nacks and expiries."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from eoclient.errors import InvalidArgument, NotFound, OutOfRange
from eoclient.server_stub.core import (
    DeadLetterPolicy,
    ExpirationPolicy,
    RetryPolicy,
    SubscriptionConfig,
    SubscriptionView,
    TopicConfig,
)

from .support import DLT, INVALID, PROJECT, SUB, TOPIC, Env, data


@pytest.fixture
def env() -> Env:
    env = Env()
    env.broker.topics.create(TopicConfig(DLT))
    return env


def update(env: Env, paths: Sequence[str], **fields: object) -> SubscriptionView:
    return env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC, **fields), paths)  # type: ignore[arg-type]


def redelivery_wait(env: Env, ack_id: str) -> tuple[int, str]:
    """Nack ``ack_id``; whole seconds until the message is back, and its new ack id."""
    env.nack(ack_id)
    waited = 0
    while not (deliveries := env.pull()):
        env.advance(1)
        waited += 1
        assert waited < 10_000
    return waited, deliveries[0].ack_id


# ----------------------------------------------------------------- mutable


def test_labels_are_replaced(env: Env) -> None:
    env.subscribe(labels={"a": "1", "b": "2"})
    view = update(env, ["labels"], labels={"c": "3"})
    assert view.config.labels == {"c": "3"}
    assert env.broker.subscriptions.get(SUB).config.labels == {"c": "3"}


def test_ack_deadline_applies_to_later_deliveries(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a", "b")
    assert data(env.pull(1)) == ["a"]
    update(env, ["ack_deadline_seconds"], ack_deadline_seconds=100)
    assert data(env.pull(1)) == ["b"]
    env.advance(10)
    assert data(env.pull()) == ["a"]  # the lease given before the update is unchanged
    env.advance(89)
    assert env.pull() == []
    env.advance(1)
    assert "b" in data(env.pull())


def test_ack_deadline_zero_means_the_default(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=30)
    assert update(env, ["ack_deadline_seconds"]).config.ack_deadline_seconds == 10
    update(env, ["enable_exactly_once_delivery"], enable_exactly_once_delivery=True)
    assert update(env, ["ack_deadline_seconds"]).config.ack_deadline_seconds == 60


def test_ack_deadline_out_of_range_changes_nothing(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=30, labels={"a": "1"})
    with pytest.raises(InvalidArgument, match="ack_deadline_seconds"):
        update(env, ["labels", "ack_deadline_seconds"], labels={}, ack_deadline_seconds=601)
    config = env.broker.subscriptions.get(SUB).config
    assert (config.ack_deadline_seconds, config.labels) == (30, {"a": "1"})


def test_retention_is_validated_and_unset_means_seven_days(env: Env) -> None:
    env.subscribe(message_retention_duration=3600.0)
    with pytest.raises(InvalidArgument, match="message_retention_duration"):
        update(env, ["message_retention_duration"], message_retention_duration=60.0)
    view = update(env, ["message_retention_duration"])
    assert view.config.message_retention_duration == 7 * 24 * 3600.0


def test_expiration_policy_updates_and_its_ttl_sub_path(env: Env) -> None:
    env.subscribe()
    view = update(env, ["expiration_policy"], expiration_policy=ExpirationPolicy(None))
    assert view.config.expiration_policy == ExpirationPolicy(None)
    view = update(env, ["expiration_policy.ttl"], expiration_policy=ExpirationPolicy(9 * 86400.0))
    assert view.config.expiration_policy == ExpirationPolicy(9 * 86400.0)
    view = update(env, ["expiration_policy"])  # unset: the default 31 days
    assert view.config.expiration_policy == ExpirationPolicy(31 * 86400.0)
    with pytest.raises(InvalidArgument, match="longer than message_retention_duration"):
        update(env, ["expiration_policy"], expiration_policy=ExpirationPolicy(86400.0))


def test_dead_letter_policy_is_set_changed_and_removed(env: Env) -> None:
    env.subscribe()
    view = update(env, ["dead_letter_policy"], dead_letter_policy=DeadLetterPolicy(DLT))
    assert view.config.dead_letter_policy == DeadLetterPolicy(DLT, 5)
    view = update(
        env,
        ["dead_letter_policy.max_delivery_attempts"],
        dead_letter_policy=DeadLetterPolicy("", 20),
    )
    assert view.config.dead_letter_policy == DeadLetterPolicy(DLT, 20)  # the topic stays
    other = f"{PROJECT}/topics/other-dlt"
    env.broker.topics.create(TopicConfig(other))
    view = update(
        env, ["dead_letter_policy.dead_letter_topic"], dead_letter_policy=DeadLetterPolicy(other)
    )
    assert view.config.dead_letter_policy == DeadLetterPolicy(other, 20)
    view = update(env, ["dead_letter_policy"])
    assert view.config.dead_letter_policy is None


def test_dead_letter_topic_must_exist(env: Env) -> None:
    env.subscribe()
    missing = f"{PROJECT}/topics/missing"
    with pytest.raises(NotFound):
        update(env, ["dead_letter_policy"], dead_letter_policy=DeadLetterPolicy(missing))
    assert env.broker.subscriptions.get(SUB).config.dead_letter_policy is None


def test_dead_letter_sub_path_without_a_policy_needs_a_topic(env: Env) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="dead_letter_topic must be set"):
        update(
            env,
            ["dead_letter_policy.max_delivery_attempts"],
            dead_letter_policy=DeadLetterPolicy("", 10),
        )


def test_dead_letter_max_attempts_is_validated(env: Env) -> None:
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT))
    with pytest.raises(OutOfRange, match="too large"):
        update(env, ["dead_letter_policy"], dead_letter_policy=DeadLetterPolicy(DLT, 101))


def test_retry_policy_is_set_changed_and_removed(env: Env) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    update(env, ["retry_policy"], retry_policy=RetryPolicy(30.0, 600.0))
    waited, ack_id = redelivery_wait(env, d.ack_id)
    assert waited == 30
    view = update(
        env, ["retry_policy.minimum_backoff"], retry_policy=RetryPolicy(minimum_backoff=5.0)
    )
    assert view.config.retry_policy == RetryPolicy(5.0, 600.0)
    waited, ack_id = redelivery_wait(env, ack_id)
    assert waited == 10  # the 2nd failure: 5 s * 2
    assert update(env, ["retry_policy"]).config.retry_policy is None
    waited, _ = redelivery_wait(env, ack_id)
    assert waited == 0


def test_retry_policy_bounds_are_validated(env: Env) -> None:
    env.subscribe(retry_policy=RetryPolicy(10.0, 20.0))
    with pytest.raises(InvalidArgument, match="maximum_backoff is too small"):
        update(env, ["retry_policy.minimum_backoff"], retry_policy=RetryPolicy(30.0, 0.0))
    with pytest.raises(InvalidArgument, match="out of bounds"):
        update(env, ["retry_policy"], retry_policy=RetryPolicy(10.0, 700.0))
    assert env.broker.subscriptions.get(SUB).config.retry_policy == RetryPolicy(10.0, 20.0)


def test_exactly_once_can_be_turned_on_and_off(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [first] = env.pull()
    env.nack(first.ack_id)
    [second] = env.pull()
    update(env, ["enable_exactly_once_delivery"], enable_exactly_once_delivery=True)
    assert env.broker.subscriptions.properties(SUB) == (True, False)
    reply = env.ack(first.ack_id)  # superseded: now a per-id failure
    assert reply.exactly_once
    assert reply.failures == {first.ack_id: INVALID}
    update(env, ["enable_exactly_once_delivery"], enable_exactly_once_delivery=False)
    assert env.broker.subscriptions.properties(SUB) == (False, False)
    assert env.ack(first.ack_id).ok  # best effort again: settles the message
    assert env.broker.backlog(SUB) == 0
    assert second.ack_id != first.ack_id


def test_opaque_fields_go_through_the_adapters_merge(env: Env) -> None:
    env.subscribe(extras=b"old")
    calls = []

    def merge(old: bytes, new: bytes, paths: Sequence[str]) -> bytes:
        calls.append((old, new, list(paths)))
        return b"merged"

    view = env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, extras=b"new"), ["push_config"], merge
    )
    assert calls == [(b"old", b"new", ["push_config"])]
    assert view.config.extras == b"merged"


def test_several_fields_in_one_mask(env: Env) -> None:
    env.subscribe()
    view = update(
        env,
        ["labels", "ack_deadline_seconds", "retain_acked_messages", "retry_policy"],
        labels={"x": "y"},
        ack_deadline_seconds=42,
        retain_acked_messages=True,
        retry_policy=RetryPolicy(1.0, 2.0),
    )
    config = view.config
    assert config.labels == {"x": "y"}
    assert config.ack_deadline_seconds == 42
    assert config.retain_acked_messages
    assert config.retry_policy == RetryPolicy(1.0, 2.0)


# -------------------------------------------------------------- immutable


@pytest.mark.parametrize(
    ("path", "fields"),
    [
        ("enable_message_ordering", {"enable_message_ordering": True}),
        ("filter", {"filter": "attributes:x"}),
        ("topic", {}),
        ("name", {}),
        ("detached", {"detached": True}),
    ],
)
def test_immutable_fields_are_refused_and_nothing_changes(
    env: Env, path: str, fields: dict[str, object]
) -> None:
    env.subscribe(labels={"a": "1"})
    with pytest.raises(
        InvalidArgument, match=f"the {path} field in the Subscription is not mutable"
    ):
        update(env, ["labels", path], labels={"b": "2"}, **fields)
    config = env.broker.subscriptions.get(SUB).config
    assert config.labels == {"a": "1"}
    assert not config.enable_message_ordering
    assert config.filter == ""


@pytest.mark.parametrize(
    "path",
    ["state", "topic_message_retention_duration", "nonsense", "retry_policy.nonsense", "labels.x"],
)
def test_unknown_and_output_only_paths_are_refused(env: Env, path: str) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="not a known Subscription field"):
        update(env, [path])


def test_empty_mask_is_refused(env: Env) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="update_mask"):
        update(env, [])


def test_update_of_a_missing_subscription_is_not_found(env: Env) -> None:
    with pytest.raises(NotFound):
        update(env, ["labels"])


# ------------------------------------------------------------------ topics


def test_topic_labels_retention_and_kms_are_updatable(env: Env) -> None:
    view = env.broker.topics.update(
        TopicConfig(
            TOPIC, labels={"t": "1"}, message_retention_duration=3600.0, kms_key_name="key"
        ),
        ["labels", "message_retention_duration", "kms_key_name"],
    )
    assert view.config.labels == {"t": "1"}
    assert view.config.message_retention_duration == 3600.0
    assert view.config.kms_key_name == "key"
    view = env.broker.topics.update(TopicConfig(TOPIC), ["message_retention_duration"])
    assert view.config.message_retention_duration is None  # unset: subscriptions govern


def test_topic_opaque_fields_go_through_the_adapters_merge(env: Env) -> None:
    view = env.broker.topics.update(
        TopicConfig(TOPIC, extras=b"new"),
        ["schema_settings"],
        lambda old, new, paths: old + new + ",".join(paths).encode(),
    )
    assert view.config.extras == b"newschema_settings"


@pytest.mark.parametrize(("path", "reason"), [("name", "not mutable"), ("nope", "not a known")])
def test_topic_bad_paths_are_refused(env: Env, path: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason):
        env.broker.topics.update(TopicConfig(TOPIC), [path])
    with pytest.raises(InvalidArgument, match="update_mask"):
        env.broker.topics.update(TopicConfig(TOPIC), [])


def test_topic_retention_update_shows_on_its_subscriptions(env: Env) -> None:
    env.subscribe()
    env.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=86400.0), ["message_retention_duration"]
    )
    assert env.broker.subscriptions.get(SUB).topic_message_retention_duration == 86400.0


# ------------------------------------------------------------ retry policy


def test_no_retry_policy_redelivers_at_once_after_nack_and_after_expiry(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [d] = env.pull()
    env.nack(d.ack_id)
    [d] = env.pull()  # immediately
    env.advance(10)
    assert len(env.pull()) == 1  # right at the deadline


def test_nacks_and_expiries_both_grow_the_backoff(env: Env) -> None:
    env.subscribe(ack_deadline_seconds=10, retry_policy=RetryPolicy(10.0, 600.0))
    env.publish("a")
    [d] = env.pull()
    assert redelivery_wait(env, d.ack_id)[0] == 10  # 1st failure (nack): min
    env.advance(10)  # 2nd failure (expiry)
    waited = 0
    while not (deliveries := env.pull()):
        env.advance(1)
        waited += 1
    assert waited == 20  # min * 2
    assert redelivery_wait(env, deliveries[0].ack_id)[0] == 40  # 3rd (nack): min * 4
