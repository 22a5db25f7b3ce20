"""Every file in examples/ runs, as a subprocess, and does what it says (test tier 4)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
SUMMARY = re.compile(
    r"summary: received=(?P<received>\d+) SUCCESS=(?P<success>\d+) other=(?P<other>\d+)"
    r".* duplicates=(?P<duplicates>\d+) throughput=\d+ msg/s"
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PUBSUB_EMULATOR_HOST", None)  # the examples must not reach a stray server
    env["PYTHONWARNINGS"] = "error"
    return env


def test_there_are_examples() -> None:
    assert EXAMPLES / "consumer_service.py" in SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_example_runs_its_demo(script: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(script), "--demo"],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "summary:" in result.stdout, result.stdout + result.stderr


def test_consumer_service_demo_summary() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "consumer_service.py"), "--demo", "--messages", "50"],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    found = SUMMARY.search(result.stdout)
    assert found, result.stdout
    assert found["received"] == "50"
    assert found["success"] == "50"
    assert found["other"] == "0"
    assert found["duplicates"] == "0"
    assert result.stderr == ""


def test_consumer_service_needs_a_subscription() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "consumer_service.py")],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        check=False,
    )
    assert result.returncode == 2
    assert "--subscription is required" in result.stderr


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def test_consumer_service_against_a_server_stops_gracefully_on_sigterm(
    srv: ReferenceServer,
) -> None:
    topic = "projects/eo-examples/topics/orders"
    subscription = "projects/eo-examples/subscriptions/service"
    srv.broker.create_topic(TopicConfig(topic))
    srv.broker.create_subscription(
        SubscriptionConfig(subscription, topic, enable_exactly_once_delivery=True)
    )
    srv.broker.publish(topic, [NewMessage(data=f"order {i}".encode()) for i in range(30)])
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(EXAMPLES / "consumer_service.py"),
        "--endpoint",
        srv.address,
        "--subscription",
        subscription,
        "--max-messages",
        "5",
        "--verbose",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert process.stdout is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(20):
            # One "acked <id>" line per SUCCESS: stop once all thirty are in.
            while sum(line.startswith("acked ") for line in lines) < 30:
                line = (await process.stdout.readline()).decode()
                assert line, "the service exited early: " + "".join(lines)
                lines.append(line)
            process.send_signal(signal.SIGTERM)
            stdout, stderr = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    out = "".join(lines) + stdout.decode()
    assert process.returncode == 0, out + stderr.decode()
    found = SUMMARY.search(out)
    assert found, out + stderr.decode()
    assert (found["received"], found["success"], found["other"]) == ("30", "30", "0")
    assert srv.open_streams() == 0
    assert srv.broker.backlog(subscription) == 0
