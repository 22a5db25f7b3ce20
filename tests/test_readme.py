"""Every code block of README.md runs, as written, in the order the README gives them.

Python blocks run in-process with top-level ``await`` (what ``python -m asyncio`` accepts,
as the README tells readers to use), each in a fresh namespace, against a reference server
that ``PUBSUB_EMULATOR_HOST`` points at — so a block cannot lean on names another block
defined, only on the server state earlier blocks left (topics, subscriptions, messages),
exactly as for a reader who follows the README from the top. Shell blocks run line by line.

A block preceded by ``<!-- readme-test: spark -->`` runs as a script in a subprocess with
Spark (its own, slower test); ``<!-- readme-test: skip REASON -->`` is the only way out, and
the reason is shown in the test report.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eoclient.server_stub import run_server

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FENCE = re.compile(
    r"(?:<!-- readme-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)\n```",
    re.DOTALL,
)
# Shell lines that cannot run inside the suite, and why.
NOT_RUN_HERE = {"./dev test": "it is the test suite itself (CI runs it)"}


@dataclass(frozen=True)
class Block:
    line: int  # where the block starts in README.md (1-based), for failure messages
    lang: str
    body: str
    mark: str  # "", "spark" or "skip REASON"

    def __str__(self) -> str:
        return f"README.md:{self.line} ({self.lang})"


def readme_blocks() -> list[Block]:
    text = README.read_text()
    return [
        Block(
            text.count("\n", 0, match.start("body")),
            match["lang"],
            match["body"],
            (match["mark"] or "").strip(),
        )
        for match in FENCE.finditer(text)
    ]


def test_the_readme_has_python_shell_and_spark_blocks() -> None:
    blocks = readme_blocks()
    assert {b.lang for b in blocks} >= {"python", "bash"}
    assert any(b.mark == "spark" for b in blocks)
    unknown = [b for b in blocks if b.lang not in ("python", "bash")]
    assert not unknown, f"blocks of a language this test cannot run: {unknown}"
    bad_marks = [
        b for b in blocks if b.mark and b.mark != "spark" and not b.mark.startswith("skip ")
    ]
    assert not bad_marks, f"unknown readme-test marks: {bad_marks}"


async def run_python_block(block: Block) -> str:
    """Run a block as ``python -m asyncio`` would; what it printed."""
    code = compile(
        block.body, f"README.md:{block.line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    )
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        result = eval(code, namespace)  # a coroutine when the block awaits
        if asyncio.iscoroutine(result):
            await result
    return output.getvalue()


def shell_commands(block: Block) -> Iterator[str]:
    for raw in block.body.splitlines():
        command = raw.split(" #", 1)[0].strip()
        if command and not command.startswith("#"):
            yield command


def run_shell_command(command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shlex.split(command),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _env_with(server_address: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PUBSUB_EMULATOR_HOST"] = server_address
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


@pytest.mark.timeout(240)
async def test_every_readme_block_runs_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    async with run_server() as srv:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", srv.address)
        for block in readme_blocks():
            if block.mark:
                continue  # spark: its own test below; skip: reported by the test above
            if block.lang == "python":
                try:
                    await run_python_block(block)
                except Exception as error:
                    raise AssertionError(f"{block} failed: {error!r}") from error
            else:
                for command in shell_commands(block):
                    if command in NOT_RUN_HERE:
                        continue
                    # The shell blocks' programs talk to the server from another process:
                    # run them off the event loop so the server keeps serving.
                    result = await asyncio.to_thread(
                        run_shell_command, command, _env_with(srv.address)
                    )
                    assert result.returncode == 0, (
                        f"{block}: {command!r} exited {result.returncode}\n"
                        f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
                    )
            ran.append(str(block))
    assert ran, "no README block ran"


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_the_readme_spark_block_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The blocks up to the Spark one set up the topics and messages it reads; it drains
    them into Parquet, archives them to a topic, and the backlog is empty afterwards."""
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
        pytest.skip("Spark needs java on PATH")
    blocks = readme_blocks()
    spark_block = next(b for b in blocks if b.mark == "spark")
    async with run_server() as srv:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", srv.address)
        for block in blocks:
            if block is spark_block:
                break
            if block.lang == "python" and not block.mark:
                await run_python_block(block)
        script = tmp_path / "readme_spark.py"
        script.write_text(spark_block.body)
        env = _env_with(srv.address)
        # Spark's Python workers leave sockets to the garbage collector (see
        # tests/test_examples.py::_spark_env); every other warning is an error.
        env["PYTHONWARNINGS"] = (
            "error,ignore:unclosed file <_io.Buffered:ResourceWarning"
            ",ignore:unclosed <socket.socket:ResourceWarning"
        )
        # The output goes to files, not pipes, so that a run that does not finish in time
        # still says where it was (Spark's log) when the test kills it.
        stdout_path, stderr_path = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
        with stdout_path.open("wb") as stdout_file, stderr_path.open("wb") as stderr_file:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                str(script),
                cwd=tmp_path,
                env=env,
                stdout=stdout_file,
                stderr=stderr_file,
            )
            try:
                await asyncio.wait_for(process.wait(), timeout=280)
            except TimeoutError:
                process.kill()
                await process.wait()
                pytest.fail(
                    "the README's Spark block did not finish in 280 s; its stderr ends:\n"
                    + stderr_path.read_text(errors="replace")[-4000:]
                )
        stderr = stderr_path.read_text(errors="replace")
        assert process.returncode == 0, stderr[-4000:]
        # "order 1", "order 2" (Publishing) and "order 3" (settling by ack id) all reached
        # orders-spark, which nothing else consumes.
        assert "3 orders archived" in stdout_path.read_text()
        assert srv.broker.backlog("projects/my-project/subscriptions/orders-spark") == 0
