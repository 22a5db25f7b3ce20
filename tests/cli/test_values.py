"""The command's pure parts: names, durations, instants, labels, message input."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.cli.errors import CliError
from eoclient.cli.message_input import Defaults, LineSplitter, OutgoingMessage, parse_line
from eoclient.cli.names import project_id, resource_name
from eoclient.cli.values import (
    format_duration,
    parse_duration,
    parse_duration_or_forever,
    parse_labels,
    parse_time,
    wire_duration,
    wire_time,
)

NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("kind", "value", "project", "expected"),
    [
        ("topic", "orders", "p", "projects/p/topics/orders"),
        ("topic", "projects/q/topics/orders", "p", "projects/q/topics/orders"),
        ("topic", "projects/q/topics/orders", None, "projects/q/topics/orders"),
        ("subscription", "s-1", "p", "projects/p/subscriptions/s-1"),
        ("snapshot", "snap", "p", "projects/p/snapshots/snap"),
    ],
)
def test_resource_names(kind: str, value: str, project: str | None, expected: str) -> None:
    assert resource_name(kind, value, project) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kind", "value", "project", "message"),
    [
        ("topic", "orders", None, "needs a project: pass --project, set PUBSUB_PROJECT_ID"),
        ("topic", "projects/p/subscriptions/s", "p", "names subscriptions, not topics"),
        ("topic", "projects/p/topics/", "p", "invalid topic name"),
        ("topic", "projects//topics/t", "p", "invalid topic name"),
        ("topic", "projects/p/topics/t/x", "p", "invalid topic name"),
        ("subscription", "a/b", "p", "invalid subscription name"),
        ("snapshot", "", "p", "invalid snapshot name"),
    ],
)
def test_bad_names_say_what_is_expected(
    kind: str, value: str, project: str | None, message: str
) -> None:
    with pytest.raises(CliError, match=message) as raised:
        resource_name(kind, value, project)  # type: ignore[arg-type]
    assert raised.value.exit_code == 2


def test_project_ids() -> None:
    assert project_id("projects/p") == "p"
    assert project_id("p") == "p"
    assert project_id(None) is None
    with pytest.raises(CliError, match="invalid project"):
        project_id("a/b")


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("600", 600),
        ("600s", 600),
        ("10m", 600),
        ("1h30m", 5400),
        ("7d", 604_800),
        ("2.5s", 2.5),
        (".5s", 0.5),
        ("1D2H", 93_600),
        (" 10m ", 600),
        ("2w", 14 * 86_400),  # pulsar-admin's units, one grammar for every flag
        ("1y", 365 * 86_400),
        ("1w2d", 9 * 86_400),
    ],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == datetime.timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "m", "10x", "10m5", "-5s", "1h 30m", "ten", "-2"])
def test_bad_durations_show_an_example(text: str) -> None:
    with pytest.raises(CliError, match=r"e\.g\. 600s, 10m, 7d, 2w or 1h30m\)$"):
        parse_duration(text)


def test_forever_is_minus_one_where_a_flag_allows_it() -> None:
    assert parse_duration_or_forever("-1") is None
    assert parse_duration_or_forever("3h") == datetime.timedelta(hours=3)
    with pytest.raises(CliError, match=r"-1 \(forever\) is not allowed here"):
        parse_duration("-1")
    with pytest.raises(CliError, match=r"or -1 for forever\)$"):
        parse_duration_or_forever("3q")


@given(st.integers(min_value=0, max_value=10**12))
def test_printed_durations_read_back(micros: int) -> None:
    value = datetime.timedelta(microseconds=micros)
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize(
    ("seconds", "wire", "human"),
    [
        (600, "600s", "10m"),
        (1.5, "1.500s", "1.5s"),
        (0.000001, "0.000001s", "0.000001s"),
        (604_800, "604800s", "7d"),
        (5400, "5400s", "1h30m"),
        (0, "0s", "0s"),
    ],
)
def test_duration_forms(seconds: float, wire: str, human: str) -> None:
    value = datetime.timedelta(seconds=seconds)
    assert wire_duration(value) == wire
    assert format_duration(value) == human


# ---------------------------------------------------------------- instants


def test_times() -> None:
    assert parse_time("now", NOW) == NOW
    assert parse_time("-10m", NOW) == NOW - datetime.timedelta(minutes=10)
    assert parse_time("2026-01-01T00:00:00Z", NOW) == datetime.datetime(
        2026, 1, 1, tzinfo=datetime.UTC
    )
    offset = parse_time("2026-01-01T02:00:00+02:00", NOW)
    assert offset == datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    naive = parse_time("2026-01-01T00:00:00", NOW)
    assert naive.tzinfo is not None  # read as local time, as gcloud does
    with pytest.raises(CliError, match="ISO 8601"):
        parse_time("yesterday", NOW)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "2026-01-01T00:00:00Z"),
        (datetime.datetime(2026, 1, 1, 0, 0, 0, 5000, datetime.UTC), "2026-01-01T00:00:00.005Z"),
        (datetime.datetime(2026, 1, 1, 0, 0, 0, 5, datetime.UTC), "2026-01-01T00:00:00.000005Z"),
    ],
)
def test_wire_times(value: datetime.datetime, text: str) -> None:
    assert wire_time(value) == text


# ---------------------------------------------------------------- labels


def test_labels() -> None:
    assert parse_labels(["a=1,b=2", "c=3", "a=4"]) == {"a": "4", "b": "2", "c": "3"}
    assert parse_labels(["empty="]) == {"empty": ""}
    for bad in ["a", "=1", "a=1,,b=2"]:
        with pytest.raises(CliError, match="expected KEY=VALUE"):
            parse_labels([bad])


# ---------------------------------------------------------------- message input

NO_DEFAULTS = Defaults()


@pytest.mark.parametrize(
    ("raw", "json_lines", "expected"),
    [
        (b"hello", False, OutgoingMessage(b"hello", {}, "", 3)),
        (b"  spaced  ", False, OutgoingMessage(b"  spaced  ", {}, "", 3)),
        (b"\xff\x00", False, OutgoingMessage(b"\xff\x00", {}, "", 3)),
        (b"   ", False, None),
        (b"", True, None),
        (b'{"data": "hi"}', True, OutgoingMessage(b"hi", {}, "", 3)),
        (b'{"dataBase64": "/wA="}', True, OutgoingMessage(b"\xff\x00", {}, "", 3)),
        (
            b'{"data": "x", "attributes": {"k": "v"}, "ordering_key": "o"}',
            True,
            OutgoingMessage(b"x", {"k": "v"}, "o", 3),
        ),
        (b'{"attributes": {"k": "v"}}', True, OutgoingMessage(b"", {"k": "v"}, "", 3)),
        # A line of `eoclient tail --format json`: delivery fields ignored, bytes win.
        (
            b'{"messageId": "1", "data": "x", "dataBase64": "eQ==", "attributes": {},'
            b' "orderingKey": "k", "publishTime": "2026-01-01T00:00:00Z", "ackId": "a",'
            b' "deliveryAttempt": 0, "settled": "ack", "ackStatus": "SUCCESS", "ackInfo": null}',
            True,
            OutgoingMessage(b"y", {}, "k", 3),
        ),
    ],
)
def test_lines(raw: bytes, json_lines: bool, expected: OutgoingMessage | None) -> None:
    assert parse_line(raw, 3, json_lines, NO_DEFAULTS) == expected


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{", "line 7: not valid JSON"),
        (b"[1]", "line 7: expected a JSON object, got list"),
        (b'{"data": 1}', "line 7: data must be a string"),
        (b'{"dataBase64": "%%"}', "line 7: dataBase64 is not valid base64"),
        (b'{"data": "x", "colour": "red"}', "line 7: unknown key"),
        (b'{"data": "x", "attributes": {"k": 1}}', "line 7: attributes must be an object"),
        (b'{"data": "x", "orderingKey": 5}', "line 7: orderingKey must be a string"),
        (b'{"data": "x", "attributes": {"": "v"}}', "line 7: an attribute key must not be empty"),
        (b'{"data": ""}', "line 7: a message needs data or attributes"),
    ],
)
def test_bad_json_lines_name_the_line(raw: bytes, message: str) -> None:
    with pytest.raises(CliError, match=message):
        parse_line(raw, 7, True, NO_DEFAULTS)


def test_defaults_apply_and_lines_win() -> None:
    defaults = Defaults({"a": "1", "b": "2"}, "key")
    assert parse_line(b"x", 1, False, defaults) == OutgoingMessage(
        b"x", {"a": "1", "b": "2"}, "key", 1
    )
    line = b'{"data": "x", "attributes": {"b": "3"}, "orderingKey": ""}'
    assert parse_line(line, 1, True, defaults) == OutgoingMessage(b"x", {"a": "1", "b": "3"}, "", 1)


@given(
    st.lists(st.binary(max_size=20).map(lambda b: b.replace(b"\n", b"")), max_size=20),
    st.lists(st.integers(min_value=1, max_value=30), max_size=40),
    st.booleans(),
)
def test_lines_survive_any_chunking(lines: list[bytes], cuts: list[int], crlf: bool) -> None:
    lines = [line.rstrip(b"\r") for line in lines]
    text = b"".join(line + (b"\r\n" if crlf else b"\n") for line in lines)
    splitter = LineSplitter()
    got: list[tuple[int, bytes]] = []
    position = 0
    for cut in cuts:
        got.extend(splitter.feed(text[position : position + cut]))
        position += cut
    got.extend(splitter.feed(text[position:]))
    got.extend(splitter.close())
    assert got == list(enumerate(lines, start=1))


def test_a_last_line_without_newline_counts() -> None:
    splitter = LineSplitter()
    assert splitter.feed(b"a\nb") == [(1, b"a")]
    assert splitter.close() == [(2, b"b")]
