"""Shared fixtures for the tests that talk over the wire (tier 3: integration, contract,
differential).

* ``emulator`` (session): Google's Pub/Sub emulator on a free 127.0.0.1 port; yields
  ``host:port``. Skips when java or the emulator jar is absent, unless
  ``EOCLIENT_REQUIRE_EMULATOR=1`` (set by ``.ci/run``), where that is a failure.
* ``served`` (session): ``eoclient serve --port 0`` in a subprocess; yields ``host:port``.
* ``clock`` / ``reference`` (function): ``run_server()`` in-process on 127.0.0.1 port 0,
  on a ``FakeClock`` the test advances (then ``reference.tick()``).
* ``wire_factory`` / ``wire``: ``Wire`` clients (``support/wire.py``: raw grpc.aio calls
  to google.pubsub.v1), closed after the test.

Every process started here binds 127.0.0.1 and is stopped here, even when a test fails.
Helpers that are not fixtures live in the ``support`` package (``tests/support/``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import NoReturn

import pytest
from support.processes import eoclient_serve, free_port, stop_process_group, wait_for_line
from support.wire import Wire

from eoclient._clock import FakeClock
from eoclient.server_stub.server import ReferenceServer, run_server

REQUIRE_EMULATOR = os.environ.get("EOCLIENT_REQUIRE_EMULATOR") == "1"
EMULATOR_PACKAGE = "google-cloud-cli-pubsub-emulator"
EMULATOR_START_TIMEOUT = 30.0  # 1-5 s measured here; a loaded machine is slower


# --------------------------------------------------------------------- processes


def _emulator_jar() -> Path | None:
    """The emulator jar, found as docs/protocol.md#where-the-emulator-differs says (dpkg),
    or at its usual path."""
    candidates: list[str] = []
    if shutil.which("dpkg"):
        listing = subprocess.run(
            ["dpkg", "-L", EMULATOR_PACKAGE], capture_output=True, text=True, check=False
        )
        candidates = [line for line in listing.stdout.splitlines() if line.endswith("-all.jar")]
    candidates.append(
        "/usr/lib/google-cloud-sdk/platform/pubsub-emulator/lib/cloud-pubsub-emulator-0.8.20-all.jar"
    )
    return next((Path(c) for c in candidates if Path(c).is_file()), None)


def _unavailable(reason: str) -> NoReturn:
    if REQUIRE_EMULATOR:
        pytest.fail(f"EOCLIENT_REQUIRE_EMULATOR=1 but {reason}", pytrace=False)
    pytest.skip(f"Google's Pub/Sub emulator is not available: {reason}")


@pytest.fixture(scope="session")
def emulator() -> Iterator[str]:
    """Google's emulator (java -jar, its own process group) on 127.0.0.1; yields host:port."""
    java = shutil.which("java")
    if java is None:
        _unavailable("java is not on PATH")
    jar = _emulator_jar()
    if jar is None:
        _unavailable(f"the {EMULATOR_PACKAGE} jar is not installed (dpkg -L {EMULATOR_PACKAGE})")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="pubsub-emulator-") as tmp:
        log = Path(tmp) / "emulator.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [java, "-jar", str(jar), "--host=127.0.0.1", f"--port={port}"],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # kill the group: no orphan JVM survives the session
            )
        try:
            try:
                wait_for_line(process, log, r"Server started", EMULATOR_START_TIMEOUT)
            except RuntimeError as error:
                _unavailable(f"the emulator did not start: {error}")
            yield f"127.0.0.1:{port}"
        finally:
            stop_process_group(process)


@pytest.fixture(scope="session")
def served() -> Iterator[str]:
    """``eoclient serve --port 0`` in a subprocess; yields the host:port it printed."""
    with eoclient_serve() as serve:
        yield serve.wait_for(r"export PUBSUB_EMULATOR_HOST=(\S+)").group(1)


# ------------------------------------------------------------ test order

# The longest parts of the suite, started first: pytest -n (./dev test) hands files to the
# workers in collection order, so a long directory collected last (Spark, a third of the
# suite) would keep one worker busy long after the other ran out of work.
LONGEST_FIRST = ("spark", "packaging", "durability", "docs", "contract", "soak")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of ``LONGEST_FIRST``'s directories first, in that order; the rest as
    collected (a stable sort: the order within a file never changes)."""
    tests = Path(__file__).resolve().parent

    def rank(item: pytest.Item) -> int:
        try:
            parts = item.path.resolve().relative_to(tests).parts
        except ValueError:  # not under tests/
            parts = ()
        top = parts[0] if len(parts) > 1 else ""
        return LONGEST_FIRST.index(top) if top in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


# ------------------------------------------------------------ in-process server


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def reference(clock: FakeClock) -> AsyncIterator[ReferenceServer]:
    """``run_server()`` on 127.0.0.1 port 0 over ``clock``, history recorded."""
    async with run_server(clock=clock) as server:
        yield server


@pytest.fixture
async def wire_factory() -> AsyncIterator[Callable[[str], Wire]]:
    """Open ``Wire`` clients to any address; all (and their streams) are closed after."""
    opened: list[Wire] = []

    def connect(address: str) -> Wire:
        client = Wire(address)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        await client.close()


@pytest.fixture
async def wire(reference: ReferenceServer, wire_factory: Callable[[str], Wire]) -> Wire:
    """A ``Wire`` to the in-process reference server."""
    return wire_factory(reference.address)
