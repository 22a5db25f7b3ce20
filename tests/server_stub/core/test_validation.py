"""Broker core: resource names and the validation of properties and requests (tier 1).

Rules: docs/protocol.md#subscription-properties-and-defaults (bounds and defaults) and
docs/protocol.md#validation-and-error-texts (codes and texts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from eoclient.errors import AlreadyExists, InvalidArgument, NotFound, OutOfRange
from eoclient.server_stub.core import (
    DeadLetterPolicy,
    ExpirationPolicy,
    NewMessage,
    Page,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.model import DELETED_TOPIC
from eoclient.server_stub.core.names import ID_RULE

from .support import DLT, PROJECT, SUB, TOPIC, Env

DAY = 24 * 3600.0


@pytest.fixture
def env() -> Env:
    return Env()


# ---------------------------------------------------------------- resource names

VALID_IDS = [
    "abc",
    "a" * 255,
    "Topic-1_2.3~4+5%6",
    "z9-",
    "gooseberry",  # starts with "goo", not "goog"
]

INVALID_IDS = [
    "ab",  # too short
    "a" * 256,  # too long
    "1abc",  # must start with a letter
    "-abc",
    "_abc",
    "ab$c",  # character outside [A-Za-z0-9-_.~+%]
    "ab c",
    "ab/c",
    "abc!",
    "goog",
    "goog-topic",
    "googlers",
    "",
]


@pytest.mark.parametrize("topic_id", VALID_IDS)
def test_valid_resource_names_are_accepted(env: Env, topic_id: str) -> None:
    name = f"{PROJECT}/topics/{topic_id}"
    env.broker.topics.create(TopicConfig(name))
    assert env.broker.topics.get(name).config.name == name


@pytest.mark.parametrize("topic_id", INVALID_IDS)
def test_invalid_topic_ids_are_rejected_with_the_real_text(env: Env, topic_id: str) -> None:
    name = f"{PROJECT}/topics/{topic_id}"
    with pytest.raises(InvalidArgument) as raised:
        env.broker.topics.create(TopicConfig(name))
    assert raised.value.message.startswith(f"Invalid resource name given (name={name}).")
    # Then the rule it broke (a "/" makes it no name of a topic at all).
    assert raised.value.message.endswith("/topics/{id}." if "/" in topic_id else ID_RULE)


@pytest.mark.parametrize(
    ("topic_id", "problem"),
    [
        ("ab", "The id 'ab' is 2 characters long."),
        ("a" * 256, f"The id '{'a' * 256}' is 256 characters long."),
        ("1abc", "The id '1abc' does not start with a letter."),
        ("éabc", "The id 'éabc' does not start with a letter."),
        ("goog-topic", "The id 'goog-topic' starts with goog."),
        ("ab c$", "The id 'ab c$' holds ' ', '$'."),
    ],
)
def test_a_bad_id_is_told_what_is_wrong_with_it(env: Env, topic_id: str, problem: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        env.broker.topics.create(TopicConfig(f"{PROJECT}/topics/{topic_id}"))
    assert raised.value.message.endswith(f" {problem} {ID_RULE}")


# (An empty subscription name asks the server to assign one: tested below.)
@pytest.mark.parametrize("sub_id", [i for i in INVALID_IDS if i])
def test_invalid_subscription_ids_are_rejected(env: Env, sub_id: str) -> None:
    name = f"{PROJECT}/subscriptions/{sub_id}"
    with pytest.raises(InvalidArgument, match="Invalid resource name given"):
        env.subscribe(name)


@pytest.mark.parametrize(
    "name",
    [
        "projects/p1/subscriptions/abc",  # wrong collection for a topic
        "projects//topics/abc",  # empty project
        "project/p1/topics/abc",
        "projects/p1/topics",
        "projects/p1/topics/abc/extra",
        "abc",
    ],
)
def test_malformed_topic_paths_are_rejected(env: Env, name: str) -> None:
    with pytest.raises(InvalidArgument, match=r"Invalid resource name given \(name="):
        env.broker.topics.get(name)


def test_subscription_without_name_gets_a_server_assigned_valid_name(env: Env) -> None:
    view = env.broker.subscriptions.create(SubscriptionConfig("", TOPIC))
    assert view.config.name.startswith(f"{PROJECT}/subscriptions/")
    assert env.broker.subscriptions.get(view.config.name).config.topic == TOPIC


# ------------------------------------------------------------- existence rules


def test_subscription_to_missing_topic_is_not_found(env: Env) -> None:
    with pytest.raises(NotFound):
        env.broker.subscriptions.create(SubscriptionConfig(SUB, f"{PROJECT}/topics/missing"))


def test_duplicate_topic_already_exists(env: Env) -> None:
    with pytest.raises(AlreadyExists):
        env.broker.topics.create(TopicConfig(TOPIC))


def test_duplicate_subscription_already_exists(env: Env) -> None:
    env.subscribe()
    with pytest.raises(AlreadyExists):
        env.subscribe()


def test_missing_topic_and_subscription_are_not_found(env: Env) -> None:
    with pytest.raises(NotFound):
        env.broker.topics.get(f"{PROJECT}/topics/missing")
    with pytest.raises(NotFound):
        env.broker.subscriptions.get(f"{PROJECT}/subscriptions/missing")
    with pytest.raises(NotFound):
        env.broker.publishing.publish(f"{PROJECT}/topics/missing", [NewMessage(b"x")])
    with pytest.raises(NotFound):
        env.broker.leasing.pull(f"{PROJECT}/subscriptions/missing", 1)


def test_dead_letter_topic_must_exist(env: Env) -> None:
    with pytest.raises(NotFound):
        env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT))
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT))


# -------------------------------------------------------------- ack deadline


@pytest.mark.parametrize("seconds", [-1, 1, 9, 601, 10_000])
def test_ack_deadline_outside_10_to_600_is_rejected(env: Env, seconds: int) -> None:
    with pytest.raises(InvalidArgument, match="ack_deadline_seconds"):
        env.subscribe(ack_deadline_seconds=seconds)


@pytest.mark.parametrize("seconds", [10, 600])
def test_ack_deadline_bounds_are_inclusive(env: Env, seconds: int) -> None:
    env.subscribe(ack_deadline_seconds=seconds)
    assert env.broker.subscriptions.get(SUB).config.ack_deadline_seconds == seconds


def test_unset_ack_deadline_defaults_to_10(env: Env) -> None:
    env.subscribe()
    assert env.broker.subscriptions.get(SUB).config.ack_deadline_seconds == 10


def test_unset_ack_deadline_defaults_to_60_on_exactly_once(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True)
    assert env.broker.subscriptions.get(SUB).config.ack_deadline_seconds == 60


def test_explicit_ack_deadline_is_kept_on_exactly_once(env: Env) -> None:
    env.subscribe(enable_exactly_once_delivery=True, ack_deadline_seconds=20)
    assert env.broker.subscriptions.get(SUB).config.ack_deadline_seconds == 20


# -------------------------------------------------------------------- modack


@pytest.mark.parametrize("seconds", [-1, 601])
def test_modack_outside_0_to_600_rejects_the_whole_request(env: Env, seconds: int) -> None:
    env.subscribe(ack_deadline_seconds=10)
    env.publish("a")
    [d] = env.pull()
    with pytest.raises(InvalidArgument):
        env.modack(seconds, d.ack_id)
    # Not applied: the lease still ends at the original 10 s deadline.
    env.advance(11)
    assert [r.message.message_id for r in env.pull()] == [d.message.message_id]


@pytest.mark.parametrize("seconds", [0, 600])
def test_modack_bounds_are_inclusive(env: Env, seconds: int) -> None:
    env.subscribe()
    env.publish("a")
    [d] = env.pull()
    assert env.modack(seconds, d.ack_id).ok


# ------------------------------------------------------------------ retention


@pytest.mark.parametrize("seconds", [599.0, 31 * DAY + 1, 0.0, -1.0])
def test_subscription_retention_outside_10min_to_31d_is_rejected(env: Env, seconds: float) -> None:
    with pytest.raises(InvalidArgument, match="message_retention_duration"):
        env.subscribe(message_retention_duration=seconds, expiration_policy=ExpirationPolicy(None))


@pytest.mark.parametrize("seconds", [600.0, 31 * DAY])
def test_subscription_retention_bounds_are_inclusive(env: Env, seconds: float) -> None:
    env.subscribe(message_retention_duration=seconds, expiration_policy=ExpirationPolicy(None))
    assert env.broker.subscriptions.get(SUB).config.message_retention_duration == seconds


def test_unset_subscription_retention_defaults_to_7_days(env: Env) -> None:
    env.subscribe()
    assert env.broker.subscriptions.get(SUB).config.message_retention_duration == 7 * DAY


@pytest.mark.parametrize("seconds", [599.0, 31 * DAY + 1])
def test_topic_retention_outside_10min_to_31d_is_rejected(env: Env, seconds: float) -> None:
    with pytest.raises(InvalidArgument, match="message_retention_duration"):
        env.broker.topics.create(
            TopicConfig(f"{PROJECT}/topics/other", message_retention_duration=seconds)
        )


@pytest.mark.parametrize("seconds", [600.0, 31 * DAY])
def test_topic_retention_bounds_are_inclusive(env: Env, seconds: float) -> None:
    name = f"{PROJECT}/topics/other"
    env.broker.topics.create(TopicConfig(name, message_retention_duration=seconds))
    assert env.broker.topics.get(name).config.message_retention_duration == seconds


def test_topic_retention_update_is_validated(env: Env) -> None:
    with pytest.raises(InvalidArgument):
        env.broker.topics.update(
            TopicConfig(TOPIC, message_retention_duration=60.0), ["message_retention_duration"]
        )


# ---------------------------------------------------------- dead-letter policy


@pytest.mark.parametrize(
    ("attempts", "word"), [(4, "too small"), (1, "too small"), (101, "too large")]
)
def test_max_delivery_attempts_outside_5_to_100_is_out_of_range(
    env: Env, attempts: int, word: str
) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    with pytest.raises(OutOfRange, match=f"max_delivery_attempts is {word}"):
        env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, attempts))


@pytest.mark.parametrize("attempts", [5, 100])
def test_max_delivery_attempts_bounds_are_inclusive(env: Env, attempts: int) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, attempts))
    policy = env.broker.subscriptions.get(SUB).config.dead_letter_policy
    assert policy == DeadLetterPolicy(DLT, attempts)


def test_max_delivery_attempts_zero_means_5(env: Env) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    env.subscribe(dead_letter_policy=DeadLetterPolicy(DLT, 0))
    policy = env.broker.subscriptions.get(SUB).config.dead_letter_policy
    assert policy is not None
    assert policy.max_delivery_attempts == 5


# --------------------------------------------------------------- retry policy


@pytest.mark.parametrize(
    ("minimum", "maximum"),
    [(-1.0, 10.0), (601.0, 601.0), (0.0, 601.0), (10.0, -1.0)],
)
def test_retry_backoff_outside_0_to_600_is_rejected(
    env: Env, minimum: float, maximum: float
) -> None:
    with pytest.raises(InvalidArgument, match="out of bounds"):
        env.subscribe(retry_policy=RetryPolicy(minimum, maximum))


def test_retry_maximum_backoff_below_minimum_is_rejected(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="maximum_backoff is too small"):
        env.subscribe(retry_policy=RetryPolicy(100.0, 10.0))


@pytest.mark.parametrize(("minimum", "maximum"), [(0.0, 0.0), (600.0, 600.0), (10.0, 600.0)])
def test_retry_backoff_bounds_are_inclusive(env: Env, minimum: float, maximum: float) -> None:
    env.subscribe(retry_policy=RetryPolicy(minimum, maximum))


# ------------------------------------------------------------ expiration policy


def test_expiration_ttl_below_one_day_is_rejected(env: Env) -> None:
    with pytest.raises(InvalidArgument, match=r"expiration_policy\.ttl is too small"):
        env.subscribe(message_retention_duration=600.0, expiration_policy=ExpirationPolicy(DAY - 1))


def test_expiration_ttl_of_one_day_is_accepted(env: Env) -> None:
    env.subscribe(message_retention_duration=600.0, expiration_policy=ExpirationPolicy(DAY))


@pytest.mark.parametrize("ttl", [2 * DAY, 1.5 * DAY])
def test_expiration_ttl_must_be_longer_than_retention(env: Env, ttl: float) -> None:
    with pytest.raises(InvalidArgument, match="must be longer than"):
        env.subscribe(message_retention_duration=2 * DAY, expiration_policy=ExpirationPolicy(ttl))


def test_expiration_defaults_to_31_days_and_none_never_expires(env: Env) -> None:
    env.subscribe()
    assert env.broker.subscriptions.get(SUB).config.expiration_policy == ExpirationPolicy(31 * DAY)
    env.subscribe(f"{PROJECT}/subscriptions/forever", expiration_policy=ExpirationPolicy(None))
    view = env.broker.subscriptions.get(f"{PROJECT}/subscriptions/forever")
    assert view.config.expiration_policy == ExpirationPolicy(None)


# --------------------------------------------------------------------- filter


def test_filter_longer_than_256_bytes_is_rejected(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="256 bytes"):
        env.subscribe(filter="é" * 129)  # 258 bytes, 129 characters


def test_filter_of_256_bytes_is_accepted(env: Env) -> None:
    expression = 'attributes.k = "' + "é" * 119 + '"'  # 16 + 238 + 1 = 255 bytes
    expression += " "
    assert len(expression.encode()) == 256
    env.subscribe(filter=expression)


# -------------------------------------------------------------------- publish


def _publish(env: Env, messages: list[NewMessage], request_bytes: int = 0) -> list[str]:
    return env.broker.publishing.publish(TOPIC, messages, request_bytes)


def test_publish_rejects_an_empty_message_and_publishes_nothing(env: Env) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="empty"):
        _publish(env, [NewMessage(b"ok"), NewMessage()])
    assert env.broker.backlog(SUB) == 0


def test_publish_accepts_attributes_without_data(env: Env) -> None:
    assert len(_publish(env, [NewMessage(attributes={"k": "v"})])) == 1


def test_publish_rejects_an_empty_request(env: Env) -> None:
    with pytest.raises(InvalidArgument):
        _publish(env, [])


def test_publish_rejects_more_than_1000_messages(env: Env) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="1001"):
        _publish(env, [NewMessage(b"x")] * 1001)
    assert env.broker.backlog(SUB) == 0
    assert len(_publish(env, [NewMessage(b"x")] * 1000)) == 1000


def test_publish_rejects_requests_over_10_000_000_bytes(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="10000000"):
        _publish(env, [NewMessage(b"x")], request_bytes=10_000_001)
    _publish(env, [NewMessage(b"x")], request_bytes=10_000_000)


def test_publish_rejects_more_than_100_attributes(env: Env) -> None:
    too_many = {f"k{i}": "v" for i in range(101)}
    with pytest.raises(InvalidArgument, match="at most 100"):
        _publish(env, [NewMessage(attributes=too_many)])
    _publish(env, [NewMessage(attributes={f"k{i}": "v" for i in range(100)})])


def test_publish_rejects_attribute_keys_over_256_bytes(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="256 bytes"):
        _publish(env, [NewMessage(attributes={"k" * 257: "v"})])
    _publish(env, [NewMessage(attributes={"k" * 256: "v"})])


def test_publish_rejects_attribute_values_over_1024_bytes(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="1024 bytes"):
        _publish(env, [NewMessage(attributes={"k": "é" * 513})])
    _publish(env, [NewMessage(attributes={"k": "é" * 512})])


@pytest.mark.parametrize("key", ["", "goog", "googkey"])
def test_publish_rejects_empty_and_reserved_attribute_keys(env: Env, key: str) -> None:
    with pytest.raises(InvalidArgument):
        _publish(env, [NewMessage(b"x", attributes={key: "v"})])


def test_publish_accepts_the_official_clients_tracing_attribute_keys(env: Env) -> None:
    _publish(env, [NewMessage(b"x", attributes={"googclient_OpenTelemetrySpanContext": "v"})])


def test_publish_rejects_ordering_keys_over_1024_bytes(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="1024 bytes"):
        _publish(env, [NewMessage(b"x", ordering_key="k" * 1025)])
    _publish(env, [NewMessage(b"x", ordering_key="k" * 1024)])


@pytest.mark.parametrize("keys", [("a", "b"), ("a", ""), ("", "a")])
def test_publish_rejects_mixed_ordering_keys_in_one_request(
    env: Env, keys: tuple[str, str]
) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="same ordering key"):
        _publish(env, [NewMessage(b"x", ordering_key=k) for k in keys])
    assert env.broker.backlog(SUB) == 0


# ---------------------------------------------------------- pull / stream / ack


@pytest.mark.parametrize("max_messages", [0, -1])
def test_pull_max_messages_must_be_positive(env: Env, max_messages: int) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="max_messages"):
        env.pull(max_messages)


@pytest.mark.parametrize("seconds", [0, 9, 601])
def test_stream_ack_deadline_outside_10_to_600_is_rejected(env: Env, seconds: int) -> None:
    env.subscribe()
    with pytest.raises(InvalidArgument, match="stream_ack_deadline_seconds"):
        env.broker.leasing.open_stream(SUB, stream_ack_deadline=seconds)
    stream = env.broker.leasing.open_stream(SUB, stream_ack_deadline=10)
    with pytest.raises(InvalidArgument, match="stream_ack_deadline_seconds"):
        env.broker.leasing.set_stream_ack_deadline(stream, seconds)


def test_open_stream_on_missing_subscription_is_not_found(env: Env) -> None:
    with pytest.raises(NotFound):
        env.broker.leasing.open_stream(f"{PROJECT}/subscriptions/missing", stream_ack_deadline=10)


@pytest.mark.parametrize("exactly_once", [False, True])
def test_empty_ack_id_list_is_rejected(env: Env, exactly_once: bool) -> None:
    env.subscribe(enable_exactly_once_delivery=exactly_once)
    with pytest.raises(InvalidArgument, match="not specified an ack ID"):
        env.ack()
    with pytest.raises(InvalidArgument, match="not specified an ack ID"):
        env.modack(10)


# ------------------------------------------- stored but not enforced properties


def test_unenforced_properties_round_trip_unchanged(env: Env) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    config = SubscriptionConfig(
        SUB,
        TOPIC,
        ack_deadline_seconds=42,
        retain_acked_messages=True,
        message_retention_duration=3600.0,
        labels={"team": "eo", "env": "test"},
        enable_message_ordering=True,
        expiration_policy=ExpirationPolicy(2 * DAY),
        filter='attributes.kind = "a"',
        dead_letter_policy=DeadLetterPolicy(DLT, 7),
        retry_policy=RetryPolicy(1.5, 30.0),
        enable_exactly_once_delivery=True,
        extras=b"\x0a\x03opaque push config",
    )
    env.broker.subscriptions.create(config)
    assert env.broker.subscriptions.get(SUB).config == config
    [listed] = env.broker.subscriptions.list(PROJECT, 0, "").items
    assert listed.config == config


def test_topic_labels_kms_and_extras_round_trip(env: Env) -> None:
    config = TopicConfig(
        f"{PROJECT}/topics/labelled",
        labels={"a": "b"},
        message_retention_duration=7200.0,
        kms_key_name="projects/p1/locations/x/keyRings/r/cryptoKeys/k",
        extras=b"\x01\x02",
    )
    env.broker.topics.create(config)
    assert env.broker.topics.get(config.name).config == config


def test_update_subscription_validates_and_keeps_immutable_fields(env: Env) -> None:
    env.subscribe(enable_message_ordering=True, filter="attributes:x")
    with pytest.raises(InvalidArgument, match="not mutable"):
        env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC), ["enable_message_ordering"])
    with pytest.raises(InvalidArgument, match="not mutable"):
        env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC), ["filter"])
    with pytest.raises(InvalidArgument, match="update_mask"):
        env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC), [])
    with pytest.raises(InvalidArgument, match="ack_deadline_seconds"):
        env.broker.subscriptions.update(
            SubscriptionConfig(SUB, TOPIC, ack_deadline_seconds=5), ["ack_deadline_seconds"]
        )
    view = env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, ack_deadline_seconds=30, labels={"x": "y"}),
        ["ack_deadline_seconds", "labels"],
    )
    assert view.config.ack_deadline_seconds == 30
    assert view.config.labels == {"x": "y"}
    assert view.config.enable_message_ordering
    assert view.config.filter == "attributes:x"


# ------------------------------------------------ topic deletion and listing


def test_deleting_a_topic_marks_its_subscriptions_deleted_topic(env: Env) -> None:
    env.subscribe()
    env.publish("kept")
    env.broker.topics.delete(TOPIC)
    assert env.broker.subscriptions.get(SUB).config.topic == DELETED_TOPIC
    with pytest.raises(NotFound):
        env.broker.topics.get(TOPIC)
    with pytest.raises(NotFound):
        env.publish("lost")
    # The backlog stays deliverable.
    assert [d.message.data for d in env.pull()] == [b"kept"]
    # A new topic of the same name does not adopt the old subscriptions.
    env.broker.topics.create(TopicConfig(TOPIC))
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == ()
    env.publish("new")
    assert env.broker.backlog(SUB) == 1


def _all_pages(
    fetch: Callable[[int, str], Page[Any]], page_size: int
) -> tuple[list[list[str]], list[str]]:
    """Follow next_page_token to the end; returns the names on each page and the tokens."""
    pages: list[list[str]] = []
    tokens: list[str] = []
    token = ""
    while True:
        page = fetch(page_size, token)
        pages.append([item if isinstance(item, str) else item.config.name for item in page.items])
        tokens.append(page.next_page_token)
        token = page.next_page_token
        if not token:
            return pages, tokens


def test_list_topics_paginates_in_name_order_within_the_project(env: Env) -> None:
    names = [f"{PROJECT}/topics/t-{i}" for i in range(5)]
    for name in reversed(names):
        env.broker.topics.create(TopicConfig(name))
    env.broker.topics.create(TopicConfig("projects/p2/topics/t-other"))
    expected = sorted([*names, TOPIC])
    pages, tokens = _all_pages(lambda size, token: env.broker.topics.list(PROJECT, size, token), 2)
    assert pages == [expected[0:2], expected[2:4], expected[4:6]]
    assert all(tokens[:-1])
    assert tokens[-1] == ""
    whole = env.broker.topics.list(PROJECT, 0, "")
    assert [t.config.name for t in whole.items] == expected
    assert whole.next_page_token == ""


def test_list_subscriptions_and_topic_subscriptions_paginate(env: Env) -> None:
    names = [f"{PROJECT}/subscriptions/s-{i}" for i in range(5)]
    for name in names:
        env.subscribe(name)
    env.broker.topics.create(TopicConfig("projects/p2/topics/other"))
    env.broker.subscriptions.create(
        SubscriptionConfig("projects/p2/subscriptions/s-x", "projects/p2/topics/other")
    )
    pages, _ = _all_pages(
        lambda size, token: env.broker.subscriptions.list(PROJECT, size, token), 3
    )
    assert pages == [names[0:3], names[3:5]]
    pages, _ = _all_pages(
        lambda size, token: env.broker.topics.list_subscriptions(TOPIC, size, token), 2
    )
    assert pages == [names[0:2], names[2:4], names[4:5]]


def test_list_rejects_bad_page_size_token_and_project(env: Env) -> None:
    with pytest.raises(InvalidArgument):
        env.broker.topics.list(PROJECT, -1, "")
    with pytest.raises(InvalidArgument):
        env.broker.topics.list(PROJECT, 1, "%%%not-base64")
    with pytest.raises(InvalidArgument):
        env.broker.topics.list("projects", 1, "")


def test_delete_subscription_removes_it_from_its_topic(env: Env) -> None:
    env.subscribe()
    env.broker.subscriptions.delete(SUB)
    assert env.broker.topics.list_subscriptions(TOPIC, 0, "").items == ()
    with pytest.raises(NotFound):
        env.broker.subscriptions.get(SUB)
    with pytest.raises(NotFound):
        env.broker.subscriptions.delete(SUB)


def test_31_day_retention_without_an_expiration_policy_is_accepted(env: Env) -> None:
    # The ttl > retention rule applies to a policy the caller sets, not to the 31-day
    # default (docs/protocol.md#retention-and-expiration).
    env.subscribe(message_retention_duration=31 * DAY)
    view = env.broker.subscriptions.get(SUB)
    assert view.config.message_retention_duration == 31 * DAY
    assert view.config.expiration_policy == ExpirationPolicy(31 * DAY)


def test_31_day_retention_with_an_explicit_31_day_policy_is_refused(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="must be longer than"):
        env.subscribe(
            message_retention_duration=31 * DAY, expiration_policy=ExpirationPolicy(31 * DAY)
        )


def test_updating_retention_to_31_days_keeps_the_default_policy_valid(env: Env) -> None:
    env.subscribe()
    env.broker.subscriptions.update(
        SubscriptionConfig(SUB, TOPIC, message_retention_duration=31 * DAY),
        ["message_retention_duration"],
    )
    assert env.broker.subscriptions.get(SUB).config.message_retention_duration == 31 * DAY


def test_updating_retention_past_an_explicit_policy_is_refused(env: Env) -> None:
    env.subscribe(message_retention_duration=DAY, expiration_policy=ExpirationPolicy(3 * DAY))
    with pytest.raises(InvalidArgument, match="must be longer than"):
        env.broker.subscriptions.update(
            SubscriptionConfig(SUB, TOPIC, message_retention_duration=4 * DAY),
            ["message_retention_duration"],
        )
