"""``eoclient publish``, ``pull``, ``tail``, ``seek`` and ack by id, against the reference
server, in tables and in JSON."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from eoclient.pytest_plugin import ServerThread

from .support import Eo


@pytest.fixture
def eod(eo: Eo) -> Eo:
    """Topic ``orders`` with the exactly-once subscription ``billing``."""
    eo.ok("topics", "create", "orders")
    eo.ok(
        "subscriptions",
        "create",
        "billing",
        "--topic",
        "orders",
        "--enable-exactly-once-delivery",
        "--enable-message-ordering",
    )
    return eo


def _data(messages: list[dict[str, object]]) -> list[object]:
    return [m["data"] for m in messages]


# ---------------------------------------------------------------- publish


def test_publish_arguments(eod: Eo) -> None:
    report = eod.json(
        "publish", "orders", "one", "two", "--attribute", "k=v,a=b", "--ordering-key", "user-1"
    )
    assert report["topic"] == f"projects/{eod.project}/topics/orders"
    assert report["published"] == 2
    assert len(report["messageIds"]) == 2
    assert report["skippedBlankLines"] == 0
    pulled = eod.json("pull", "billing", "--limit", "5", "--ack")
    assert _data(pulled) == ["one", "two"]
    assert pulled[0]["attributes"] == {"a": "b", "k": "v"}
    assert pulled[0]["orderingKey"] == "user-1"
    assert [m["messageId"] for m in pulled] == report["messageIds"]
    table = eod.ok("publish", "orders", "three").stdout.splitlines()
    assert table[0].startswith("messageId: ")
    assert table[1].startswith(f"published 1 message to projects/{eod.project}/topics/orders")
    assert table[1].endswith("msg/s)")


def test_publish_stdin_lines_byte_for_byte(eod: Eo) -> None:
    text = b"first\n\n  spaced  \n\xff\xfe binary\r\nlast without newline"
    report = eod.json("publish", "orders", input=text)
    assert report["published"] == 4
    assert report["skippedBlankLines"] == 1
    pulled = eod.json("pull", "billing", "--limit", "10", "--ack")
    assert [base64.b64decode(m["dataBase64"]) for m in pulled] == [
        b"first",
        b"  spaced  ",
        b"\xff\xfe binary",
        b"last without newline",
    ]
    assert pulled[2]["data"] is None  # not UTF-8: only dataBase64 carries it
    summary = eod.ok("publish", "orders", input="a\nb\n").stdout
    assert summary.startswith("published 2 messages to ")


def test_publish_a_file_of_json_lines(eod: Eo, tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    lines = [
        {"data": "plain"},
        {"dataBase64": base64.b64encode(b"\x00\x01").decode(), "orderingKey": "k"},
        {"attributes": {"only": "attributes"}},
        {"data": "both", "attributes": {"x": "1"}, "ordering_key": "k"},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    report = eod.json(
        "publish", "orders", "--file", str(path), "--json-lines", "--attribute", "source=file"
    )
    assert report["published"] == 4
    pulled = eod.json("pull", "billing", "--limit", "10", "--ack")
    # Messages of different ordering keys may come in any order: index them by data.
    by_data = {base64.b64decode(m["dataBase64"]): m for m in pulled}
    assert sorted(by_data) == [b"", b"\x00\x01", b"both", b"plain"]
    assert by_data[b""]["attributes"] == {"only": "attributes", "source": "file"}
    assert by_data[b"both"]["attributes"] == {"source": "file", "x": "1"}
    assert by_data[b"both"]["orderingKey"] == by_data[b"\x00\x01"]["orderingKey"] == "k"
    assert by_data[b"plain"]["orderingKey"] == ""


def test_a_bad_line_in_a_file_publishes_nothing(eod: Eo, tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    path.write_text('{"data": "fine"}\n{"data": "fine too"}\n{"data": 7}\n')
    line = eod.fails("publish", "orders", "--file", str(path), "--json-lines")
    assert line.startswith("eoclient: line 3: data must be a string")
    assert eod.json("pull", "billing", "--limit", "5", "--nack") == []


def test_a_bad_line_on_stdin_stops_there(eod: Eo) -> None:
    line = eod.fails(
        "publish",
        "orders",
        "--json-lines",
        input='{"data": "a"}\n{"data": "b"}\nnot json\n{"data": "c"}\n',
    )
    assert line.startswith("eoclient: line 3: not valid JSON")
    assert line.endswith("published the 2 message(s) before it, nothing after")
    assert _data(eod.json("pull", "billing", "--limit", "5", "--ack")) == ["a", "b"]


def test_nothing_to_publish_is_an_error(eod: Eo, tmp_path: Path) -> None:
    line = eod.fails("publish", "orders", input="", code=2)
    assert line == (
        "eoclient: nothing to publish: standard input had no message; give MESSAGE "
        "arguments, --file FILE, or one message a line on standard input"
    )
    line = eod.fails("publish", "orders", input="\n\n", code=2)
    assert "standard input had no message (only 2 blank line(s))" in line
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    line = eod.fails("publish", "orders", "--file", str(empty), code=2)
    assert f"nothing to publish: {empty} has no message" in line
    assert eod.json("pull", "billing", "--limit", "5", "--nack") == []


def test_a_line_the_service_would_refuse_is_named(eod: Eo) -> None:
    line = eod.fails(
        "publish",
        "orders",
        "--json-lines",
        input='{"data": "a"}\n{"data": "b", "attributes": {"": "v"}}\n{"data": "c"}\n',
    )
    assert line.startswith("eoclient: line 2: an attribute key must not be empty")
    assert line.endswith("published the 1 message(s) before it, nothing after")
    assert _data(eod.json("pull", "billing", "--limit", "5", "--ack")) == ["a"]


def test_tail_output_replays_into_another_topic(eod: Eo) -> None:
    eod.ok("topics", "create", "replay")
    eod.ok("subscriptions", "create", "replayed", "--topic", "replay")
    eod.ok("publish", "orders", "x", "y", "--attribute", "k=v")
    lines = eod.ok("tail", "billing", "--limit", "2", "--format", "json").stdout
    assert eod.json("publish", "replay", "--json-lines", input=lines)["published"] == 2
    replayed = eod.json("pull", "replayed", "--limit", "5", "--ack")
    assert sorted(_data(replayed)) == ["x", "y"]
    assert replayed[0]["attributes"] == {"k": "v"}


def test_publish_failures(eod: Eo, tmp_path: Path) -> None:
    line = eod.fails("publish", "missing", "hello")
    assert line.startswith("eoclient: NOT_FOUND: ")
    assert "not both" in eod.fails("publish", "orders", "x", "--file", __file__, code=2)
    assert "--json-lines reads lines" in eod.fails("publish", "orders", "x", "--json-lines", code=2)
    assert "does not exist" in eod.fails(
        "publish", "orders", "--file", str(tmp_path / "nope"), code=2
    )
    # The SDK refuses an attribute the service would refuse (empty key), before sending.
    assert eod.fails("publish", "orders", "x", "--attribute", "=v", code=2)


def test_publish_progress_bar_ends_with_the_rate(eod: Eo, tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"message {i}\n" for i in range(500)))
    result = eod.ok("publish", "orders", "--file", str(path), "--progress")
    assert "500/500" in result.stderr
    assert "msg/s" in result.stderr
    assert result.stdout.startswith("published 500 messages")
    quiet = eod.ok("publish", "orders", "--file", str(path))
    assert quiet.stderr == ""  # not a terminal: no bar unless asked


# ---------------------------------------------------------------- pull


def test_pull_shows_each_acks_exactly_once_status(eod: Eo, cli_server: ServerThread) -> None:
    ids = eod.json("publish", "orders", "a", "b", "c")["messageIds"]
    sub = f"projects/{eod.project}/subscriptions/billing"
    cli_server.call(
        lambda server: server.inject_ack_failure(sub, ids[1], "PERMANENT_FAILURE_OTHER")
    )
    pulled = eod.json("pull", "billing", "--limit", "3", "--ack")
    assert [(m["data"], m["settled"], m["ackStatus"]) for m in pulled] == [
        ("a", "ack", "SUCCESS"),
        ("b", "ack", "OTHER"),
        ("c", "ack", "SUCCESS"),
    ]
    assert pulled[1]["ackInfo"] == "PERMANENT_FAILURE_OTHER"
    assert pulled[0]["ackInfo"] is None


def test_pull_without_settling_then_ack_by_id(eod: Eo) -> None:
    eod.ok("publish", "orders", "a", "b")
    pulled = eod.json("pull", "billing", "--limit", "2")
    assert [m["settled"] for m in pulled] == [None, None]
    ack_ids = [m["ackId"] for m in pulled]
    acked = eod.json("subscriptions", "ack", "billing", *ack_ids)
    assert acked == [{"ackId": i, "status": "SUCCESS", "info": None} for i in ack_ids]
    # Acked already: on an exactly-once subscription the id is no longer valid.
    again = eod.ok("subscriptions", "ack", "billing", ack_ids[0]).stdout.splitlines()
    assert again[0].split() == ["ACK", "ID", "STATUS", "INFO"]
    assert again[2].split()[:2] == [ack_ids[0], "INVALID_ACK_ID"]
    assert eod.json("pull", "billing", "--limit", "5", "--nack") == []


def test_pull_nack_peeks_and_modify_ack_deadline(eod: Eo) -> None:
    eod.ok("publish", "orders", "a", "--ordering-key", "k")
    peeked = eod.json("pull", "billing", "--nack")
    assert [(m["data"], m["settled"], m["ackStatus"]) for m in peeked] == [("a", "nack", "SUCCESS")]
    leased = eod.json("pull", "billing")
    assert [m["data"] for m in leased] == ["a"]
    extended = eod.json(
        "subscriptions", "modify-ack-deadline", "billing", leased[0]["ackId"], "--ack-deadline", "0"
    )
    assert extended == [{"ackId": leased[0]["ackId"], "status": "SUCCESS", "info": None}]
    again = eod.json("pull", "billing")
    table = eod.ok(
        "subscriptions",
        "modify-ack-deadline",
        "billing",
        again[0]["ackId"],
        "--ack-deadline",
        "0",
    ).stdout.splitlines()
    assert table[2].split() == [again[0]["ackId"], "SUCCESS"]
    table = eod.ok("pull", "billing", "--ack").stdout.splitlines()
    assert table[0].split() == [
        "MESSAGE",
        "ID",
        "PUBLISHED",
        "ATTEMPT",
        "ORDERING",
        "KEY",
        "ATTRIBUTES",
        "DATA",
        "ACK",
    ]
    assert table[2].split()[-3:] == ["a", "ACK", "SUCCESS"]


def test_pull_table_shows_ack_ids_when_left_leased(eod: Eo) -> None:
    eod.ok("publish", "orders", "hello [bold]markup[/bold]\tand a tab")
    result = eod.ok("pull", "billing")
    header, _, row = result.stdout.splitlines()[:3]
    assert header.split()[-2:] == ["ACK", "ID"]
    assert "hello [bold]markup[/bold]\\tand a tab" in row  # shown as is, escaped
    assert eod.ok("pull", "billing", "--nack").stderr.strip() == (
        f"no messages in projects/{eod.project}/subscriptions/billing right now"
    )


# ---------------------------------------------------------------- tail


def test_tail_acks_each_message_as_it_comes(eod: Eo) -> None:
    eod.ok("publish", "orders", "a", "b", "c", "--ordering-key", "k")
    result = eod.ok("tail", "billing", "--limit", "3")
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["PUBLISHED", "MESSAGE", "ID"]
    assert [line.split()[-1] for line in lines[1:]] == ["a", "b", "c"]
    assert all("ACK SUCCESS" in line for line in lines[1:])
    assert result.stderr.strip() == (
        f"tail done: 3 message(s) from projects/{eod.project}/subscriptions/billing (ACK SUCCESS 3)"
    )
    assert eod.json("pull", "billing", "--nack") == []


def test_tail_nack_gives_messages_back(eod: Eo) -> None:
    eod.ok("publish", "orders", "a")
    streamed = [
        json.loads(line)
        for line in eod.ok(
            "tail", "billing", "--nack", "--limit", "1", "--format", "json"
        ).stdout.splitlines()
    ]
    assert [(m["data"], m["settled"], m["ackStatus"]) for m in streamed] == [
        ("a", "nack", "SUCCESS")
    ]
    assert _data(eod.json("pull", "billing", "--ack")) == ["a"]


def test_tail_of_a_missing_subscription(eod: Eo) -> None:
    assert eod.fails("tail", "missing").startswith("eoclient: NOT_FOUND: ")  # stdout empty


# ---------------------------------------------------------------- seek


def test_seek_to_a_snapshot_and_to_a_time(eod: Eo) -> None:
    eod.ok("subscriptions", "update", "billing", "--retain-acked-messages")
    eod.ok("publish", "orders", "a", "b")
    eod.ok("snapshots", "create", "before", "--subscription", "billing")
    assert _data(eod.json("pull", "billing", "--limit", "5", "--ack")) == ["a", "b"]
    sub = f"projects/{eod.project}/subscriptions/billing"
    snap = f"projects/{eod.project}/snapshots/before"
    assert eod.json("seek", "billing", "--snapshot", "before") == {
        "subscription": sub,
        "time": None,
        "snapshot": snap,
    }
    assert _data(eod.json("pull", "billing", "--limit", "5", "--ack")) == ["a", "b"]
    table = eod.ok("subscriptions", "seek", "billing", "--time", "-1h")
    assert table.stdout.startswith(f"seeked subscription {sub} to time 20")
    assert _data(eod.json("pull", "billing", "--limit", "5", "--ack")) == ["a", "b"]
    seeked = eod.json("seek", "billing", "--time", "2000-01-01T00:00:00Z")
    assert seeked["time"] == "2000-01-01T00:00:00Z"
    line = eod.fails("seek", "billing", "--snapshot", "missing")
    assert line.startswith("eoclient: NOT_FOUND: ")
