"""The installed ``eoclient`` program as a real subprocess: exit statuses, stderr, and
``tail`` stopping cleanly on Ctrl-C (SIGINT)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eoclient.pytest_plugin import ServerThread

from .support import Eo, assert_one_line_error

EOCLIENT = Path(sys.executable).with_name("eoclient")  # the console script of this venv
WAIT = 20.0  # seconds for a subprocess to show something; generous for a loaded machine


def run(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EOCLIENT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
        check=False,
    )


def test_the_console_script_is_installed() -> None:
    assert EOCLIENT.is_file(), f"{EOCLIENT} missing: is eoclient installed in this venv?"
    result = run("--version", env={})
    assert result.returncode == 0
    assert result.stdout.startswith("eoclient, version ")
    listed = run("--help", env={}).stdout
    for verb in (
        "topics",
        "subscriptions",
        "snapshots",
        "publish",
        "pull",
        "tail",
        "seek",
        "serve",
        "demo",
    ):
        assert re.search(rf"^\s+{verb}\s", listed, re.MULTILINE), verb


def test_verbs_and_errors_as_a_program(eo: Eo) -> None:
    created = run("topics", "create", "orders", "--format", "json", env=eo.env)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["name"] == f"projects/{eo.project}/topics/orders"
    published = run("publish", "orders", "--format", "json", env=eo.env, stdin="a\nb\n")
    assert json.loads(published.stdout)["published"] == 2
    missing = run("topics", "describe", "missing", env=eo.env)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert_one_line_error(missing.stderr)
    assert missing.stderr.startswith("eoclient: NOT_FOUND: ")
    usage = run("topics", "create", env=eo.env)
    assert usage.returncode == 2
    assert_one_line_error(usage.stderr)
    unreachable = run("topics", "list", env={**eo.env, "PUBSUB_EMULATOR_HOST": "127.0.0.1:1"})
    assert unreachable.returncode == 1
    assert_one_line_error(unreachable.stderr)
    assert "UNAVAILABLE" in unreachable.stderr


def _read_until(stream: object, pattern: str, deadline: float) -> str:
    """Lines of ``stream`` up to one matching ``pattern`` (fails at ``deadline``)."""
    seen = ""
    while time.monotonic() < deadline:
        line = stream.readline()  # type: ignore[attr-defined]
        if not line:
            break
        seen += line
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r}; got:\n{seen}")


def test_tail_stops_cleanly_on_ctrl_c(eod_names: tuple[Eo, str]) -> None:
    eo, _ = eod_names
    process = subprocess.Popen(
        [str(EOCLIENT), "tail", "billing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **eo.env},
    )
    try:
        deadline = time.monotonic() + WAIT
        _read_until(process.stdout, r"^PUBLISHED\s+MESSAGE ID", deadline)
        eo.ok("publish", "orders", "while tailing")
        shown = _read_until(process.stdout, r"while tailing", deadline)
        assert "ACK SUCCESS" in shown
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert stderr.strip().endswith(
        f"tail stopped: 1 message(s) from projects/{eo.project}/subscriptions/billing "
        "(ACK SUCCESS 1)"
    )
    assert stdout == ""
    # It consumed what it showed, and nothing else is held.
    assert eo.json("pull", "billing", "--nack") == []


def test_tail_with_a_limit_gives_back_what_it_held(
    eod_names: tuple[Eo, str],
) -> None:
    eo, _ = eod_names
    process = subprocess.Popen(
        [str(EOCLIENT), "tail", "billing", "--format", "json", "--limit", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **eo.env},
    )
    try:
        time.sleep(0.5)  # let it open its stream; the message below may race it
        eo.ok("publish", "orders", "first", "second", "--ordering-key", "k")
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert [json.loads(line)["data"] for line in stdout.splitlines()] == ["first"]
    # "second" was delivered to the stream too (flow control lets 1 through, but the
    # server may send more); whatever tail held unshown it gave back at once.
    assert [m["data"] for m in eo.json("pull", "billing", "--ack", "--limit", "5")] == ["second"]


def test_publish_from_an_open_pipe_stops_on_ctrl_c(eod_names: tuple[Eo, str]) -> None:
    eo, _ = eod_names
    process = subprocess.Popen(
        [str(EOCLIENT), "publish", "orders"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **eo.env},
    )
    try:
        assert process.stdin is not None
        process.stdin.write("one\ntwo\n")
        process.stdin.flush()  # and the pipe stays open: the reader waits for more
        deadline = time.monotonic() + WAIT
        pulled: list[str] = []
        while len(pulled) < 2:  # published line by line, not at the end of input
            assert time.monotonic() < deadline, pulled
            pulled += [m["data"] for m in eo.json("pull", "billing", "--ack", "--limit", "2")]
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert sorted(pulled) == ["one", "two"]
    assert process.returncode == 130, stderr
    assert stdout == ""
    assert_one_line_error(stderr)
    assert stderr.strip() == ("eoclient: interrupted — published the 2 message(s) read before it")


def test_serve_keeps_its_flags(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(EOCLIENT),
                "serve",
                "--port",
                "0",
                "--no-rest",
                "--history",
                "--host",
                "127.0.0.1",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + WAIT
        while "export PUBSUB_EMULATOR_HOST=" not in log.read_text():
            assert time.monotonic() < deadline, log.read_text()
            assert process.poll() is None, log.read_text()
            time.sleep(0.05)
        text = log.read_text()
        assert "REST/JSON" not in text  # --no-rest
        address = re.search(r"PUBSUB_EMULATOR_HOST=(\S+)", text)
        assert address is not None
        listed = run(
            "topics",
            "list",
            "--project",
            "p",
            "--format",
            "json",
            env={"PUBSUB_EMULATOR_HOST": address.group(1)},
        )
        assert listed.returncode == 0
        assert json.loads(listed.stdout) == []
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    help_text = run("serve", "--help", env={}).stdout
    for flag in ("--host", "--port", "--rest-port", "--no-rest", "--history"):
        assert flag in help_text


def test_serve_reports_a_taken_port(cli_server: ServerThread) -> None:
    port = cli_server.address.rsplit(":", 1)[1]
    result = run("serve", "--port", "0", "--rest-port", port, env={})
    assert result.returncode == 1
    assert_one_line_error(result.stderr)
    assert "(see --rest-port / --no-rest)" in result.stderr


def test_tail_stops_on_ctrl_c_while_idle(eod_names: tuple[Eo, str]) -> None:
    eo, name = eod_names
    process = subprocess.Popen(
        [str(EOCLIENT), "tail", "billing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **eo.env},
    )
    try:
        _read_until(process.stdout, r"^PUBLISHED", time.monotonic() + WAIT)
        time.sleep(0.3)  # into the stream's wait for messages
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=WAIT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    assert stderr.strip() == f"tail stopped: 0 message(s) from {name}"


@pytest.fixture
def eod_names(eo: Eo) -> tuple[Eo, str]:
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
    return eo, f"projects/{eo.project}/subscriptions/billing"
