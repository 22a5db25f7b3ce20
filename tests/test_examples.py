"""Every file in examples/ runs, as a subprocess, and does what it says (test tier 4)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# Spark examples take 30-60 s here (session start-up, a cold first micro-batch): each has a
# test of its own below, with its own time limits; the others all run in the quick test.
SPARK_SCRIPTS = [EXAMPLES / "spark_pipeline.py"]
SCRIPTS = [p for p in sorted(EXAMPLES.glob("*.py")) if p not in SPARK_SCRIPTS]
SUMMARY = re.compile(
    r"summary: received=(?P<received>\d+) SUCCESS=(?P<success>\d+) other=(?P<other>\d+)"
    r".* duplicates=(?P<duplicates>\d+) throughput=\d+ msg/s"
)
SPARK_SUMMARY = re.compile(
    r"summary: events=(?P<events>\d+) readings=(?P<readings>\d+) windows=(?P<windows>\d+) "
    r"open=(?P<open>\d+) parquet_rows=(?P<parquet_rows>\d+) published=(?P<published>\d+) "
    r"matches=(?P<matches>\w+)"
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PUBSUB_EMULATOR_HOST", None)  # the examples must not reach a stray server
    env["PYTHONWARNINGS"] = "error"
    return env


def _spark_env() -> dict[str, str]:
    env = _env()
    # Spark's Python workers inherit this variable, and pyspark leaves some of its own
    # sockets to the garbage collector: the socket files of each worker forked by
    # pyspark/daemon.py (collected after every task), and now and then a worker's socket to
    # the JVM at exit. A ResourceWarning is raised in a finalizer, where "error" cannot fail
    # anything: it only prints an "Exception ignored" traceback to stderr, dozens per run.
    # Those two messages are muted; every other warning is still an error.
    env["PYTHONWARNINGS"] = (
        "error,ignore:unclosed file <_io.Buffered:ResourceWarning"
        ",ignore:unclosed <socket.socket:ResourceWarning"
    )
    return env


def _run_example(
    script: Path, *args: str, timeout: float = 30, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else _env(),
        check=False,
    )


def test_there_are_examples() -> None:
    assert EXAMPLES / "consumer_service.py" in SCRIPTS
    assert all(script.exists() for script in SPARK_SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_example_runs_its_demo(script: Path) -> None:
    result = _run_example(script, "--demo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "summary:" in result.stdout, result.stdout + result.stderr


def test_consumer_service_demo_summary() -> None:
    result = _run_example(EXAMPLES / "consumer_service.py", "--demo", "--messages", "50")
    assert result.returncode == 0, result.stdout + result.stderr
    found = SUMMARY.search(result.stdout)
    assert found, result.stdout
    assert found["received"] == "50"
    assert found["success"] == "50"
    assert found["other"] == "0"
    assert found["duplicates"] == "0"
    assert result.stderr == ""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_spark_pipeline_demo_matches_plain_python() -> None:
    """The demo's Parquet output and published aggregates both equal an independent
    computation over the published events (the example exits 1 otherwise)."""
    pytest.importorskip(
        "pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')"
    )
    if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
        pytest.skip("Spark needs java on PATH")
    result = _run_example(
        EXAMPLES / "spark_pipeline.py",
        "--demo",
        timeout=240,  # 35-50 s here; more while other Spark jobs share the two cores
        env=_spark_env(),
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    found = SPARK_SUMMARY.search(result.stdout)
    assert found, output
    counts = {name: int(value) for name, value in found.groupdict().items() if value.isdigit()}
    assert found["matches"] == "yes", output
    # 600 readings and 2 messages that are not, over 6 sensors and 7 one-minute windows:
    # the last window of each sensor is still open when the run ends.
    assert counts == {
        "events": 602,
        "readings": 600,
        "windows": 36,
        "open": 6,
        "parquet_rows": 36,
        "published": 36,
    }, output


def test_spark_pipeline_needs_its_arguments() -> None:
    pytest.importorskip("pyspark")
    result = _run_example(EXAMPLES / "spark_pipeline.py", "--subscription", "s")
    assert result.returncode == 2
    assert "--topic, --output, --checkpoint required" in result.stderr


def test_consumer_service_needs_a_subscription() -> None:
    result = _run_example(EXAMPLES / "consumer_service.py")
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
    srv.broker.topics.create(TopicConfig(topic))
    srv.broker.subscriptions.create(
        SubscriptionConfig(subscription, topic, enable_exactly_once_delivery=True)
    )
    srv.broker.publishing.publish(
        topic, [NewMessage(data=f"order {i}".encode()) for i in range(30)]
    )
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
