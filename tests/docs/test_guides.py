"""Every code block of the documentation's guides runs, as written, in the order of its page.

Each page is a session of its own, as for a reader who follows it from the top: a fresh
reference server that ``PUBSUB_EMULATOR_HOST`` points at (``PUBSUB_PROJECT_ID`` is
``my-project``; its bucket directories in ``buckets/``), a fresh working directory, and
one namespace for the page's Python blocks (a reader pastes them, in order, into one
``python -m asyncio``, which accepts top-level ``await``). Shell blocks run line by line
(a trailing backslash continues a line).

A block may be preceded by a mark:

* ``<!-- docs-test: pytest -->`` — a test module: it runs under pytest in a process of its
  own, with eoclient's pytest plugin and no server of ours (the plugin starts its own);
* ``<!-- docs-test: spark -->`` — a PySpark script: it runs in a process of its own against
  the page's server, after the page's earlier blocks (its own, slower test);
* ``<!-- docs-test: sync -->`` — blocking code (Google's synchronous client, on the
  migration page): it runs in a worker thread, in the page's namespace, so that the
  server, which shares the test's event loop, keeps serving;
* ``<!-- docs-test: skip REASON -->`` — the only way out; the reason is in the report.

Pages written elsewhere and included in the site as records (benchmarks, the protocol,
...) are not tutorials: their blocks are commands run by other tests or by hand.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eoclient.server_stub import run_server

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# Included as they are, from their owners: designs, records and tables, not guides.
RECORDS = {
    "architecture.md",
    "benchmarks.md",
    "compatibility.md",
    "emulator-differences.md",
    "policies.md",
    "protocol.md",
    "soak.md",
}
FENCE = re.compile(
    r"(?:<!-- docs-test: (?P<mark>[^>]*?) -->\n)?```(?P<lang>[\w{}-]*)[^\n]*\n(?P<body>.*?)\n```",
    re.DOTALL,
)
RUN = {"python", "bash"}
# Shown, never run: output, configuration files, directives of the site itself, and the
# JavaScript of message transforms (the server runs it; the page's Python blocks show that).
SHOWN = {
    "text",
    "toml",
    "yaml",
    "json",
    "ini",
    "console",
    "{toctree}",
    "{eval-rst}",
    "javascript",
}
PROJECT = "my-project"


@dataclass(frozen=True)
class Block:
    page: str  # relative to docs/
    line: int  # where the block's body starts (1-based), for failure messages
    lang: str
    body: str
    mark: str  # "", "pytest", "spark" or "skip REASON"

    def __str__(self) -> str:
        return f"docs/{self.page}:{self.line} ({self.lang})"


def guide_pages() -> list[str]:
    return sorted(
        str(path.relative_to(DOCS))
        for path in DOCS.rglob("*.md")
        if str(path.relative_to(DOCS)) not in RECORDS and "_build" not in path.parts
    )


def page_blocks(page: str) -> list[Block]:
    text = (DOCS / page).read_text()
    return [
        Block(
            page,
            text.count("\n", 0, match.start("body")) + 1,
            match["lang"],
            match["body"],
            (match["mark"] or "").strip(),
        )
        for match in FENCE.finditer(text)
    ]


def test_the_guides_have_blocks_this_test_knows() -> None:
    blocks = [b for page in guide_pages() for b in page_blocks(page)]
    assert sum(b.lang == "python" and not b.mark for b in blocks) >= 10
    unknown = [str(b) for b in blocks if b.lang not in RUN | SHOWN]
    assert not unknown, f"blocks of a language this test neither runs nor knows: {unknown}"
    marks = [b for b in blocks if b.mark]
    bad = [
        str(b)
        for b in marks
        if b.mark not in ("pytest", "spark", "sync") and not b.mark.startswith("skip ")
    ]
    assert not bad, f"unknown docs-test marks: {bad}"
    readme_marks = [p for p in guide_pages() if "<!-- readme-test:" in (DOCS / p).read_text()]
    assert not readme_marks, f"README marks (docs-test: is this runner's): {readme_marks}"
    skipped = [f"{b}: {b.mark}" for b in marks if b.mark.startswith("skip")]
    print("skipped blocks:", *skipped, sep="\n  ")  # shown with -s / in the report


def run_blocking(block: Block, namespace: dict[str, Any]) -> None:
    exec(compile(block.body, str(block), "exec"), namespace)


async def run_python(block: Block, namespace: dict[str, Any]) -> str:
    """Run a block as ``python -m asyncio`` would (in the page's namespace); its output."""
    if block.mark == "sync":
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            await asyncio.to_thread(run_blocking, block, namespace)
        return output.getvalue()
    code = compile(block.body, str(block), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        result = eval(code, namespace)  # a coroutine when the block awaits
        if asyncio.iscoroutine(result):
            await result
    return output.getvalue()


def shell_commands(body: str) -> list[str]:
    commands: list[str] = []
    pending = ""
    for raw in body.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        command = (pending + line).strip()
        pending = ""
        if command:
            commands.append(command)
    return commands


def environment(server_address: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PUBSUB_EMULATOR_HOST", None)
    if server_address is not None:
        env["PUBSUB_EMULATOR_HOST"] = server_address
        env["PUBSUB_PROJECT_ID"] = PROJECT
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        shlex.split(command),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_pytest_block(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The block as a test module of a project that installed eoclient."""
    (cwd / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    )
    (cwd / "test_from_the_docs.py").write_text(block.body + "\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_from_the_docs.py"],
        cwd=cwd,
        env=environment(None),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


async def run_page(
    page: str, cwd: Path, monkeypatch: pytest.MonkeyPatch, *, spark: bool, rounds: int = 1
) -> int:
    """Run the page's blocks in order (up to and including its Spark blocks when ``spark``),
    ``rounds`` times against the same server (a reader who follows the page again, in a new
    ``python -m asyncio``); how many ran."""
    ran = 0
    monkeypatch.chdir(cwd)
    # Its bucket directories are buckets/ of the working directory and its BigQuery stand-in
    # bigquery.duckdb there, as for a server started with `eoclient serve --buckets-dir
    # buckets --bigquery-db bigquery.duckdb` (the exports guide reads them).
    async with run_server(buckets_dir=cwd / "buckets", bigquery_db=cwd / "bigquery.duckdb") as srv:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", srv.address)
        monkeypatch.setenv("PUBSUB_PROJECT_ID", PROJECT)
        for _ in range(rounds):
            ran += await _run_blocks(page, cwd, srv.address, spark=spark)
    return ran


async def _run_blocks(page: str, cwd: Path, address: str, *, spark: bool) -> int:
    ran = 0
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    for block in page_blocks(page):
        if block.lang not in RUN or block.mark.startswith("skip"):
            continue
        if block.mark == "spark":
            if spark:
                await run_spark_block(block, cwd, address)
                ran += 1
            continue
        if block.mark == "pytest":
            if not spark:
                result = await asyncio.to_thread(run_pytest_block, block, cwd)
                assert result.returncode == 0, f"{block}:\n{result.stdout[-4000:]}"
                ran += 1
            continue
        if block.lang == "python":
            try:
                await run_python(block, namespace)
            except Exception as error:
                raise AssertionError(f"{block} failed: {error!r}") from error
        else:
            for command in shell_commands(block.body):
                # Another process talks to the server: off the event loop it serves.
                result = await asyncio.to_thread(run_shell, command, cwd, environment(address))
                assert result.returncode == 0, (
                    f"{block}: {command!r} exited {result.returncode}\n"
                    f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
                )
        ran += 1
    return ran


def runs_something(page: str, *, spark: bool) -> bool:
    return any(
        b.lang in RUN and (b.mark == "spark") == spark and not b.mark.startswith("skip")
        for b in page_blocks(page)
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [p for p in guide_pages() if runs_something(p, spark=False)])
async def test_every_block_of_the_page_runs_in_order(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await run_page(page, tmp_path, monkeypatch, spark=False) > 0


# The pages a newcomer follows first, perhaps more than once (a second reader on the same
# server, or the same reader again): they must not end in AlreadyExists the second time.
FIRST_PAGES = ("index.md", "getting-started.md")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", FIRST_PAGES)
async def test_the_first_pages_run_twice_against_one_server(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runnable = [b for b in page_blocks(page) if b.lang in RUN and not b.mark.startswith("skip")]
    assert runnable
    assert await run_page(page, tmp_path, monkeypatch, spark=False, rounds=2) == 2 * len(runnable)


def test_getting_started_installs_the_server_before_it_serves() -> None:
    text = (DOCS / "getting-started.md").read_text()
    install = text.find('pip install "eoclient[server]"')
    assert install >= 0, "getting started never installs eoclient[server]"
    assert install < text.index("\neoclient serve"), "eoclient serve before its install"


def test_the_landing_page_says_how_to_install_and_shows_an_example() -> None:
    blocks = page_blocks("index.md")
    assert any(b.lang == "bash" and "pip install" in b.body for b in blocks)
    [example] = [b for b in blocks if b.lang == "python"]
    code = [line for line in example.body.splitlines() if line.strip()]
    assert len(code) <= 15, f"the landing page's example has {len(code)} lines"
    assert "ack_with_response()" in example.body


async def run_spark_block(block: Block, cwd: Path, address: str) -> None:
    script = cwd / "from_the_docs.py"
    script.write_text(block.body)
    env = environment(address)
    # Spark's Python workers leave sockets to the garbage collector (as in
    # tests/test_examples.py); every other warning is an error.
    env["PYTHONWARNINGS"] = (
        "error,ignore:unclosed file <_io.Buffered:ResourceWarning"
        ",ignore:unclosed <socket.socket:ResourceWarning"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(process.communicate(), timeout=400)
    assert process.returncode == 0, f"{block}:\n{stderr.decode()[-4000:]}"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("page", [p for p in guide_pages() if runs_something(p, spark=True)])
async def test_the_spark_blocks_run(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    if shutil.which("java") is None:  # pragma: no cover - Java 17 is installed here
        pytest.skip("Spark needs java on PATH")
    assert await run_page(page, tmp_path, monkeypatch, spark=True) > 0


def test_the_spark_guide_lists_every_source_option() -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from eoclient.spark._options import SOURCE_OPTIONS

    guide = (DOCS / "guides" / "spark.md").read_text()
    rows = re.findall(r"^\| `(\w+)`(?:, `(\w+)`)?", guide, re.MULTILINE)
    table = {name for row in rows for name in row if name}
    assert set(SOURCE_OPTIONS) <= table, set(SOURCE_OPTIONS) - table
