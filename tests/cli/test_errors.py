"""How the command fails: one line on stderr, a non-zero exit status, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from eoclient.cli import cli, main
from eoclient.pytest_plugin import ServerThread

from .support import Eo, assert_one_line_error


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["topics", "describe", "projects/p/subscriptions/s"], "names subscriptions, not topics"),
        (["topics", "describe", "a/b"], "invalid topic name 'a/b'"),
        (["subscriptions", "describe", "projects/p/subscriptions/"], "invalid subscription"),
        (["snapshots", "describe", "projects/p/topics/t"], "names topics, not snapshots"),
        (["topics", "create", "t", "--labels", "novalue"], "expected KEY=VALUE"),
        (["topics", "create", "tee", "--message-retention-duration", "soon"], "invalid duration"),
        (["seek", "sub"], "pass exactly one of --time and --snapshot"),
        (["pull", "sub", "--ack", "--nack"], "contradict"),
        (["topics", "create"], "Missing argument 'TOPIC'"),
        (["topics", "frobnicate"], "No such command 'frobnicate'"),
        (["pull", "sub", "--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_bad_command_lines_exit_2(eo: Eo, args: list[str], message: str) -> None:
    line = eo.fails(*args, code=2)
    assert message in line
    if "Missing" in message or "No such" in message or "Invalid value" in message:
        assert "--help" in line  # click's own usage errors point at the help, on one line


def test_no_project_for_a_short_id(cli_server: ServerThread) -> None:
    result = CliRunner(env={"PUBSUB_PROJECT_ID": None}).invoke(
        cli, ["topics", "create", "orders", "--endpoint", cli_server.address]
    )
    assert result.exit_code == 2
    assert_one_line_error(result.stderr)
    assert "needs a project: pass --project, set PUBSUB_PROJECT_ID" in result.stderr
    result = CliRunner(env={"PUBSUB_PROJECT_ID": None}).invoke(
        cli, ["topics", "list", "--endpoint", cli_server.address]
    )
    assert result.exit_code == 2
    assert "topics list needs a project" in result.stderr


def test_flags_beat_the_environment(eo: Eo, cli_server: ServerThread) -> None:
    eo.ok("topics", "create", "projects/elsewhere-1/topics/orders")
    other = Eo("127.0.0.1:1", "unused")  # env points nowhere; the flags say where
    listed = other.json(
        "topics", "list", "--endpoint", cli_server.address, "--project", "projects/elsewhere-1"
    )
    assert [t["name"] for t in listed] == ["projects/elsewhere-1/topics/orders"]


@pytest.mark.parametrize(
    "args",
    [
        ["topics", "list"],
        ["subscriptions", "describe", "s-1"],
        ["publish", "orders", "hello"],
        ["pull", "sub"],
        ["tail", "sub", "--limit", "1"],
        ["snapshots", "list"],
    ],
)
def test_an_unreachable_server_is_named(args: list[str]) -> None:
    unreachable = Eo("127.0.0.1:1", "p")  # nothing listens on port 1
    line = unreachable.fails(*args)
    assert "UNAVAILABLE" in line or "127.0.0.1:1" in line
    assert "server 127.0.0.1:1: is it running?" in line


def test_a_group_alone_shows_its_help(eo: Eo) -> None:
    for args in ([], ["topics"]):
        result = eo(*args)
        assert result.exit_code == 2
        assert result.stderr.startswith(f"Usage: eoclient {' '.join(args)}".replace("  ", " "))
        assert "Commands:" in result.stderr
        assert len(result.stderr.splitlines()) > 5  # whole, not squeezed onto one line


def test_main_returns_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "topics" in capsys.readouterr().out
    assert main(["topics", "describe", "a/b"]) == 2
    assert main(["no-such-verb"]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 2


def test_an_unexpected_error_is_one_line_unless_asked(
    eo: Eo, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eoclient.cli.resource_verbs import ResourceVerbs

    def broken(*args: object) -> None:
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(ResourceVerbs, "show", broken)
    line = eo.fails("topics", "create", "orders")
    assert line == (
        "eoclient: internal error: ZeroDivisionError: boom "
        "(set EOCLIENT_TRACEBACK=1 for the traceback, and please report it)"
    )
    eo.env["EOCLIENT_TRACEBACK"] = "1"
    result = eo("topics", "create", "orders-2")
    assert result.exit_code == 1
    assert "Traceback" in result.stderr


def test_the_real_service_without_credentials_is_one_line(no_credentials: Path) -> None:
    # No emulator variable and no credentials anywhere: the real service is refused
    # by google-auth before anything is sent (nothing leaves this machine).
    result = CliRunner(env={"PUBSUB_EMULATOR_HOST": None}).invoke(
        cli, ["topics", "list", "--project", "p"]
    )
    assert result.exit_code == 1
    assert_one_line_error(result.stderr)
    assert result.stderr.startswith("eoclient: credentials for pubsub.googleapis.com:443: ")
    assert "set --endpoint or PUBSUB_EMULATOR_HOST" in result.stderr


def test_a_bad_id_is_told_the_rule_it_broke(eo: Eo) -> None:
    eo.ok("topics", "create", "orders")
    line = eo.fails("subscriptions", "create", "s2", "--topic", "orders")
    assert line.startswith("eoclient: INVALID_ARGUMENT: Invalid resource name given (name=")
    assert line.endswith(
        "The id 's2' is 2 characters long. An id is 3 to 255 characters, starts with a "
        "letter, holds only letters, digits and - _ . ~ + %, and does not start with goog."
    )
