"""Broker core: the subscription filter language (docs/protocol.md#filter-language) —
parsing, errors with their column, and what a filter does to delivery (auto-ack, never
dead-lettered)."""

from __future__ import annotations

import re

import pytest

from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import (
    DeadLetterPolicy,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.filters import (
    And,
    Equals,
    Has,
    HasPrefix,
    Not,
    NotEquals,
    Or,
    parse,
)

from .support import DLT, PROJECT, SUB, TOPIC, Env, data


@pytest.fixture
def env() -> Env:
    return Env()


def matches(expression: str, attributes: dict[str, str]) -> bool:
    parsed = parse(expression)
    assert parsed is not None
    return parsed.matches(attributes)


def column_of(expression: str) -> int:
    with pytest.raises(InvalidArgument) as caught:
        parse(expression)
    found = re.search(r"at column (\d+)", caught.value.message)
    assert found, caught.value.message
    return int(found.group(1))


# ------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        ("attributes:domain", Has("domain")),
        ('attributes.domain = "com"', Equals("domain", "com")),
        ('attributes.domain != "com"', NotEquals("domain", "com")),
        ('hasPrefix(attributes.domain, "co")', HasPrefix("domain", "co")),
        ("NOT attributes:domain", Not(Has("domain"))),
        ("-attributes:domain", Not(Has("domain"))),
        ("- attributes:domain", Not(Has("domain"))),
        ("NOT(attributes:domain)", Not(Has("domain"))),
        ("NOT NOT attributes:a", Not(Not(Has("a")))),
        ("attributes:a AND attributes:b", And((Has("a"), Has("b")))),
        ("attributes:a OR attributes:b OR attributes:c", Or((Has("a"), Has("b"), Has("c")))),
        (
            "attributes:a AND (attributes:b OR attributes:c)",
            And((Has("a"), Or((Has("b"), Has("c"))))),
        ),
        (
            "(attributes:a OR attributes:b) AND NOT attributes:c",
            And((Or((Has("a"), Has("b"))), Not(Has("c")))),
        ),
        ("((attributes:a))", Has("a")),
        ("  attributes:a  ", Has("a")),
        ("attributes : a", Has("a")),
        ('attributes.a="x"', Equals("a", "x")),
        ('attributes.my-key_2 = "v"', Equals("my-key_2", "v")),
        ('attributes."iana.org/language_tag" = "en"', Equals("iana.org/language_tag", "en")),
        ('attributes:"\\u307F\\u3093\\u306A"', Has("みんな")),
        ("attributes.k = 'single'", Equals("k", "single")),
        ("attributes:AND", Has("AND")),  # a key, not an operator
        ('hasPrefix( attributes."a b" , "" )', HasPrefix("a b", "")),
    ],
)
def test_valid_filters_parse(expression: str, tree: object) -> None:
    parsed = parse(expression)
    assert parsed is not None
    assert parsed.expression == tree


def test_empty_filter_means_no_filter() -> None:
    assert parse("") is None


def test_not_binds_tighter_than_and() -> None:
    # NOT a AND b == (NOT a) AND b, not NOT (a AND b)
    assert matches("NOT attributes:a AND attributes:b", {"b": "1"})
    assert not matches("NOT attributes:a AND attributes:b", {"a": "1"})
    assert matches("NOT attributes:a OR attributes:b", {"a": "1", "b": "1"})


@pytest.mark.parametrize(
    ("literal", "value"),
    [
        (r'"a\\b"', "a\\b"),
        (r'"say \"hi\""', 'say "hi"'),
        (r"'it\'s'", "it's"),
        (r'"\a\b\f\n\r\t\v"', "\a\b\f\n\r\t\v"),
        (r'"\x41\X42"', "AB"),
        (r'"\101\060"', "A0"),
        (r'"\u00e9\U0001F600"', "é\U0001f600"),
        ('"é"', "é"),
    ],
)
def test_string_literal_escapes(literal: str, value: str) -> None:
    parsed = parse(f"attributes.k = {literal}")
    assert parsed is not None
    assert parsed.expression == Equals("k", value)


# --------------------------------------------------------------- rejections


@pytest.mark.parametrize(
    ("expression", "column", "reason"),
    [
        # mixing AND and OR without parentheses: the column of the second operator
        ("attributes:a AND attributes:b OR attributes:c", 31, "cannot be mixed"),
        ("attributes:a OR attributes:b AND attributes:c", 30, "cannot be mixed"),
        # lowercase operators
        ("attributes:a and attributes:b", 14, "uppercase"),
        ("attributes:a or attributes:b", 14, "uppercase"),
        ("not attributes:a", 1, "uppercase"),
        # a value that is not a string literal
        ("attributes.domain = com", 21, "string literal"),
        ("attributes.domain = 1", 21, "string literal"),
        # the value on the left
        ('"com" = attributes.name', 1, "string literal"),
        # comparing two keys
        ("attributes.name = attributes.website", 19, "string literal"),
        # incomplete expressions (the docs' example)
        ('attributes.name = "com" AND ("net" OR "org")', 30, "string literal"),
        ("attributes:a AND", 17, "end of the filter"),
        ("attributes:", 12, "attribute key"),
        ("attributes.a", 13, "'=' or '!='"),
        ("attributes", 11, "':' or '.'"),
        ("AND attributes:a", 1, "on its left"),
        # escapes outside a string literal
        ('attributes.a\\b = "x"', 13, "string literal"),
        # bad string literals
        ('attributes.a = "open', 16, "unterminated"),
        ('attributes.a = "\\q"', 17, "invalid escape"),
        ('attributes.a = "\\x4"', 17, "hexadecimal"),
        ('attributes.a = "\\uD800"', 17, "code point"),
        # unknown functions and names; other operators
        ('startsWith(attributes.a, "x")', 1, "unknown name"),
        ('hasprefix(attributes.a, "x")', 1, "unknown name"),
        ('hasPrefix(attributes.a "x")', 24, "','"),
        ('hasPrefix(attributes.a, "x"', 28, "')'"),
        ('hasPrefix("x", attributes.a)', 11, "attributes.KEY"),
        ('attributes.a < "x"', 14, "'=' or '!='"),
        ('attributes.a:"x"', 13, "attributes:KEY"),
        ('data = "x"', 1, "unknown name"),
        # parentheses
        ("(attributes:a", 14, "')'"),
        ("attributes:a)", 13, "unbalanced"),
        ("()", 2, "before ')'"),
        # leftovers
        ("attributes:a attributes:b", 14, "AND, OR"),
        ("   ", 4, "empty"),
    ],
)
def test_invalid_filters_name_the_column(expression: str, column: int, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=re.escape(reason)):
        parse(expression)
    assert column_of(expression) == column


def test_error_message_quotes_the_filter() -> None:
    with pytest.raises(InvalidArgument) as caught:
        parse("attributes.x = y")
    assert caught.value.code == "INVALID_ARGUMENT"
    assert "'attributes.x = y'" in caught.value.message


# ------------------------------------------------------------------ matching


@pytest.mark.parametrize(
    ("expression", "attributes", "expected"),
    [
        ("attributes:domain", {"domain": ""}, True),
        ("attributes:domain", {"Domain": "x"}, False),  # keys are case-sensitive
        ('attributes.domain = "com"', {"domain": "com"}, True),
        ('attributes.domain = "com"', {"domain": "COM"}, False),
        ('attributes.domain = "com"', {}, False),
        ('attributes.domain != "com"', {"domain": "org"}, True),
        ('attributes.domain != "com"', {}, True),  # absent key: != is true (docs)
        ('attributes.domain != "com"', {"domain": "com"}, False),
        ('hasPrefix(attributes.domain, "co")', {"domain": "com"}, True),
        ('hasPrefix(attributes.domain, "co")', {"domain": "org"}, False),
        ('hasPrefix(attributes.domain, "co")', {}, False),
        ('hasPrefix(attributes.domain, "")', {"domain": "x"}, True),
        ('NOT hasPrefix(attributes.domain, "co")', {}, True),
        ("-attributes:domain", {"other": "x"}, True),
        ('attributes:a AND attributes.b = "1"', {"a": "", "b": "1"}, True),
        ('attributes:a AND attributes.b = "1"', {"a": "", "b": "2"}, False),
        ("attributes:a OR attributes:b", {"b": ""}, True),
        ("attributes:a OR attributes:b", {"c": ""}, False),
        ('attributes."iana.org/language_tag" = "en"', {"iana.org/language_tag": "en"}, True),
    ],
)
def test_matching(expression: str, attributes: dict[str, str], expected: bool) -> None:
    assert matches(expression, attributes) is expected


# -------------------------------------------------------- on the subscription


def test_create_subscription_rejects_a_bad_filter_with_its_column(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="at column 21"):
        env.subscribe(filter="attributes.domain = com")
    assert not env.broker.subscriptions.exists(SUB)


def test_filter_length_is_checked_before_syntax(env: Env) -> None:
    with pytest.raises(InvalidArgument, match="256 bytes"):
        env.subscribe(filter="attributes:" + "k" * 250)


def publish_with(env: Env, *attributes: dict[str, str]) -> list[str]:
    return env.broker.publishing.publish(
        TOPIC, [NewMessage(b"m", attributes=a) for a in attributes]
    )


def test_only_matching_messages_are_delivered(env: Env) -> None:
    env.subscribe(filter='attributes.region = "eu"')
    other = env.subscribe(f"{PROJECT}/subscriptions/unfiltered")
    ids = publish_with(env, {"region": "eu"}, {"region": "us"}, {"x": "y"}, {"region": "eu"})
    assert [d.message.message_id for d in env.pull()] == [ids[0], ids[3]]
    assert len(env.pull(sub=other)) == 4


def test_non_matching_messages_count_as_acknowledged(env: Env) -> None:
    env.subscribe(filter="attributes:keep", ack_deadline_seconds=10)
    publish_with(env, {"drop": "1"}, {"drop": "2"}, {"keep": "1"})
    assert env.broker.backlog(SUB) == 1
    assert env.broker.counters(SUB)["filtered"] == 2
    [d] = env.pull()
    assert env.ack(d.ack_id).ok
    env.advance(3600)
    assert env.pull() == []  # the filtered ones never come back, not even after expiry


def test_non_matching_messages_are_never_dead_lettered(env: Env) -> None:
    env.broker.topics.create(TopicConfig(DLT))
    dead = f"{PROJECT}/subscriptions/dead"
    env.broker.subscriptions.create(SubscriptionConfig(dead, DLT))
    env.subscribe(filter="attributes:keep", dead_letter_policy=DeadLetterPolicy(DLT, 5))
    publish_with(env, {"drop": "1"})
    for _ in range(10):
        env.advance(60)
        assert env.pull() == []
    assert env.broker.leasing.pull(dead, 10) == []
    assert env.broker.counters(SUB)["dead_lettered"] == 0


def test_filtered_messages_are_not_retained_for_replay(env: Env) -> None:
    env.subscribe(filter="attributes:keep", retain_acked_messages=True)
    kept, _ = publish_with(env, {"keep": "1"}, {"drop": "1"})
    [d] = env.pull()
    env.ack(d.ack_id)
    assert [m.message_id for m in env.broker.retained_acked(SUB)] == [kept]


def test_filter_on_an_ordered_subscription_keeps_the_order_of_what_matches(env: Env) -> None:
    env.subscribe(filter='attributes.t != "skip"', enable_message_ordering=True)
    env.broker.publishing.publish(
        TOPIC,
        [
            NewMessage(b"1", {"t": "a"}, "k"),
            NewMessage(b"2", {"t": "skip"}, "k"),
            NewMessage(b"3", {}, "k"),
        ],
    )
    first = env.pull()
    assert data(first) == ["1", "3"]


def test_filter_is_immutable(env: Env) -> None:
    env.subscribe(filter="attributes:a")
    with pytest.raises(InvalidArgument, match="filter field in the Subscription is not mutable"):
        env.broker.subscriptions.update(
            SubscriptionConfig(SUB, TOPIC, filter="attributes:b"), ["filter"]
        )
    assert env.broker.subscriptions.get(SUB).config.filter == "attributes:a"
    # Other updates keep the filter working.
    env.broker.subscriptions.update(SubscriptionConfig(SUB, TOPIC, labels={"x": "y"}), ["labels"])
    publish_with(env, {"b": "1"}, {"a": "1"})
    assert [d.message.attributes for d in env.pull()] == [{"a": "1"}]
