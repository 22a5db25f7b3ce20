"""The sdist and the wheel, built and tested as a release: their metadata and files, the
bare wheel in a fresh venv (the SDK alone, and it works), the wheel with the server extra
(``eoclient serve`` serves), and the pytest plugin on both sides of that line.

The wheel is built once per run and its three venvs (bare, [cli], [server]) installed side
by side while the first tests look at the files (wheel_venvs.py says how they stay fast
and honest); the servers the bare SDK and the [cli] command talk to come from this, the
full, environment.
"""

# No __init__.py here: a package named "packaging" under tests/ would shadow the packaging
# library for every test (tests/ is on sys.path for the packages beside this folder).

from __future__ import annotations

import concurrent.futures
import email
import json
import re
import select
import signal
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from wheel_venvs import ROOT, Dist, Venv, build, constraints, run, wheel_requirement

import eoclient
from eoclient.pytest_plugin import PubSubServer, SubscriptionFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SDK_REQUIREMENTS = {"grpcio", "protobuf", "googleapis-common-protos"}
EXTRAS = {"cli", "server", "transforms", "gcp", "spark", "otel", "uvloop", "all", "docs", "dev"}
# What `pip install eoclient` must not bring: the extras' dependencies.
NOT_IN_THE_SDK = {
    "aiohttp",
    "click",
    "rich",
    "pyyaml",
    "fastavro",
    "grpcio-tools",
    "prometheus-client",
    "duckdb",
    "mini-racer",
    "pyspark",
    "pyarrow",
    "pandas",
    "numpy",
    "google-auth",
}
# eoclient and its three dependencies, and grpcio's typing-extensions: five. Two more
# would mean a dependency grew a tree; look before raising this.
MOST_BARE_PACKAGES = 7
SERVER_HINT = "pip install 'eoclient[server]'"
CLI_HINT = "pip install 'eoclient[cli]'"

# A user's project, for the plugin: one test that has nothing to do with it, one that
# asks for the server, one for an asyncio client (pytest-asyncio is installed with it).
PLUGIN_PROJECT = {
    "pytest.ini": (
        "[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n"
        "filterwarnings = error\n"
    ),
    "test_unrelated.py": "def test_arithmetic():\n    assert 1 + 1 == 2\n",
    "test_with_server.py": (
        "def test_server(pubsub_server, pubsub_topic_factory):\n"
        "    assert pubsub_topic_factory('orders').name == pubsub_server.topic_path('orders')\n"
    ),
    "test_with_client.py": (
        "async def test_client(pubsub_admin, pubsub_project):\n"
        "    assert [t async for t in pubsub_admin.list_topics(pubsub_project)] == []\n"
    ),
}


class BareInstall:
    """The bare wheel's venv, and what it held right after ``pip install eoclient``
    (pytest and pytest-asyncio are added after, for the plugin's test)."""

    def __init__(self, venv: Venv) -> None:
        self.venv = venv
        self.distributions = venv.distributions()


class Installs:
    """The three venvs, installed side by side: pip waits on the registry more than it
    computes, so three at once take little longer than the slowest one."""

    def __init__(self, workdir: Path) -> None:
        self.dist = build(workdir)
        pins = constraints(workdir / "constraints.txt")
        self._pool = concurrent.futures.ThreadPoolExecutor(3, thread_name_prefix="venv")
        self.bare = self._pool.submit(self._bare, Venv.create(workdir / "bare", pins))
        self.cli = self._pool.submit(self._with, Venv.create(workdir / "cli", pins), "cli")
        self.server = self._pool.submit(
            self._with, Venv.create(workdir / "server", pins), "server", "pytest", "pytest-asyncio"
        )

    def _bare(self, venv: Venv) -> BareInstall:
        venv.install(wheel_requirement(self.dist.wheel))
        installed = BareInstall(venv)
        venv.install("pytest", "pytest-asyncio")
        return installed

    def _with(self, venv: Venv, extra: str, *more: str) -> Venv:
        venv.install(wheel_requirement(self.dist.wheel, extra), *more)
        return venv

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def installs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installs]:
    started = Installs(tmp_path_factory.mktemp("release"))
    try:
        yield started
    finally:
        started.close()


@pytest.fixture(scope="module")
def dist(installs: Installs) -> Dist:
    return installs.dist


@pytest.fixture(scope="module")
def bare(installs: Installs) -> BareInstall:
    return installs.bare.result()


@pytest.fixture(scope="module")
def admin_only(installs: Installs) -> Venv:
    return installs.cli.result()


@pytest.fixture(scope="module")
def served(installs: Installs) -> Venv:
    return installs.server.result()


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ============================================================ what is packaged


def test_twine_passes_the_sdist_and_the_wheel(dist: Dist) -> None:
    report = run([sys.executable, "-m", "twine", "check", "--strict", dist.sdist, dist.wheel])
    assert report.count("PASSED") == 2, report


def test_the_wheel_requires_the_sdk_alone_and_offers_the_extras(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        [name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(wheel.read(name))
    requirements = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    unconditional = {_key(r.name) for r in requirements if r.marker is None}
    assert unconditional == SDK_REQUIREMENTS
    assert set(metadata.get_all("Provides-Extra") or []) == EXTRAS
    assert metadata["Requires-Python"] == ">=3.11"
    assert (metadata["License-Expression"], metadata["License-File"]) == ("Apache-2.0", "LICENSE")


def _tracked(prefix: str) -> set[str]:
    listed = run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", prefix], cwd=ROOT
    )
    return {name for name in listed.split("\0") if name and (ROOT / name).is_file()}


def test_the_wheel_holds_the_package_and_nothing_else(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
    info = f"eoclient-{eoclient.__version__}.dist-info/"
    assert {n for n in names if not n.startswith(("eoclient/", info))} == set()
    # Every source file, the marker that the package is typed, the generated protobuf
    # modules and their stubs.
    package = {name.removeprefix("src/") for name in _tracked("src/eoclient")}
    assert package <= names, sorted(package - names)
    typed_and_generated = {"py.typed", "_proto/pubsub_pb2.py", "_proto/pubsub_pb2.pyi"}
    assert {f"eoclient/{name}" for name in typed_and_generated} <= names
    assert [n for n in names if "__pycache__" in n or n.endswith(".pyc")] == []
    assert f"{info}licenses/LICENSE" in names  # the Apache-2.0 text the metadata declares


def test_the_sdist_holds_the_sources_and_nothing_else(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as sdist:
        names = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    top_level = {name.split("/")[0] for name in names}
    built_from = {"pyproject.toml", "setup.cfg", "MANIFEST.in", "README.md", "LICENSE", "src"}
    assert top_level <= {"PKG-INFO", *built_from}
    package = _tracked("src/eoclient")
    assert package <= names, sorted(package - names)


# ============================================================ the bare wheel


def test_the_bare_wheel_installs_the_sdk_alone(bare: BareInstall) -> None:
    installed = {_key(name) for name in bare.distributions}
    assert {"eoclient", *SDK_REQUIREMENTS} <= installed
    assert installed & NOT_IN_THE_SDK == set()
    assert len(installed) <= MOST_BARE_PACKAGES, sorted(installed)


def test_the_sdk_from_the_bare_wheel_delivers_exactly_once(
    bare: BareInstall,
    pubsub_server: PubSubServer,
    pubsub_subscription_factory: SubscriptionFactory,
    tmp_path: Path,
) -> None:
    subscription = pubsub_subscription_factory(enable_exactly_once_delivery=True)
    count = 50
    smoke = Path(__file__).with_name("sdk_smoke.py")
    # -I: only the venv's site-packages, not this checkout's src/ or the test run's path.
    output = run(
        [bare.venv.python, "-I", smoke, subscription.topic, subscription.name, str(count)],
        cwd=tmp_path,
        env=bare.venv.environ(PUBSUB_EMULATOR_HOST=pubsub_server.address),
    )
    result = json.loads(output)
    assert Path(result["eoclient"]).is_relative_to(bare.venv.path)
    published = result["published"]
    assert len(set(published)) == count
    assert result["arrivals"] == dict.fromkeys(published, 1)
    assert result["statuses"] == dict.fromkeys(published, "SUCCESS")
    assert result["not_the_sdk"] == []
    for message_id in published:  # and the server saw one delivery and one ack of each
        history = pubsub_server.history(subscription.name, message_id)
        assert (len(history.deliveries), len(history.successful_acks)) == (1, 1)


@pytest.mark.parametrize(
    ("command", "hint"),
    [
        (["eoclient", "serve", "--port", "0"], SERVER_HINT),
        (["eoclient", "demo"], SERVER_HINT),
        (["eoclient", "topics", "list", "--project", "p"], CLI_HINT),
        (["eoclient", "--help"], CLI_HINT),
        (["python", "-m", "eoclient.cli", "serve"], SERVER_HINT),
    ],
)
def test_the_bare_wheel_names_the_extra_a_command_needs(
    bare: BareInstall, command: list[str], hint: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [bare.venv.script(command[0]), *command[1:]],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=bare.venv.environ(),
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()  # one line, no traceback
    assert line.startswith("eoclient: "), line
    assert line.endswith(hint), line


# The SDK's optional parts, each used the way a user turns it on. The bare wheel really
# lacks what they need (opentelemetry, google-auth, pyspark), so each must fail with one
# error naming the extra that brings it.
OPTIONAL_PARTS = {
    "otel": "eoclient.PublisherClient('127.0.0.1:1', enable_open_telemetry_tracing=True)",
    # A client without an endpoint connects to the real service: TLS with credentials.
    "gcp": (
        "async def connect():\n"
        "    async with eoclient.AdminClient():\n"
        "        pass\n"
        "asyncio.run(connect())"
    ),
    "spark": "import eoclient.spark",
}
OPTIONAL_PART_PROBE = """
import asyncio, sys
import eoclient
try:
    exec(sys.argv[1])
except Exception as error:
    print(f"{type(error).__name__}: {error}")
"""


@pytest.mark.parametrize("extra", sorted(OPTIONAL_PARTS))
def test_the_bare_wheel_names_the_extra_an_sdk_feature_needs(
    bare: BareInstall, extra: str, tmp_path: Path
) -> None:
    assert extra in EXTRAS  # a hint naming an extra the wheel does not offer helps nobody
    env = bare.venv.environ()
    for variable in ("PUBSUB_EMULATOR_HOST", "GOOGLE_CLOUD_UNIVERSE_DOMAIN"):
        env.pop(variable, None)
    said = run(
        [bare.venv.python, "-I", "-c", OPTIONAL_PART_PROBE, OPTIONAL_PARTS[extra]],
        cwd=tmp_path,
        env=env,
    )
    [line] = said.splitlines()  # one error, caught: the probe printed it
    assert f"pip install 'eoclient[{extra}]'" in line, line


def _write_project(into: Path) -> Path:
    for name, text in PLUGIN_PROJECT.items():
        (into / name).write_text(text)
    return into


def _pytest(venv: Venv, project: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv.python, "-I", "-m", "pytest", "-p", "no:cacheprovider", "-ra"],
        capture_output=True,
        text=True,
        cwd=project,
        env=venv.environ(),
        timeout=300,
        check=False,
    )


def test_the_plugin_without_the_server_fails_only_the_tests_that_ask_for_it(
    bare: BareInstall, tmp_path: Path
) -> None:
    done = _pytest(bare.venv, _write_project(tmp_path))
    report = done.stdout + done.stderr
    assert done.returncode == 1, report  # tests failed; 2-4 would be a broken collection
    # A fixture that fails is an error at the setup of the tests that ask for it.
    assert "1 passed, 2 errors" in report, report
    hints = [line for line in report.splitlines() if line.endswith(SERVER_HINT)]
    assert len(hints) >= 2, report  # each failing test says why in one line
    assert not re.search("Traceback|ImportError|ModuleNotFoundError", report), report


# ============================================================ the wheel with [cli]


def test_the_cli_wheel_administers_but_does_not_serve(
    admin_only: Venv, pubsub_server: PubSubServer, tmp_path: Path
) -> None:
    installed = {_key(name) for name in admin_only.distributions()}
    cli_extra = {"click", "rich", "pyyaml"}
    assert cli_extra <= installed
    assert installed & (NOT_IN_THE_SDK - cli_extra) == set()
    env = admin_only.environ(PUBSUB_EMULATOR_HOST=pubsub_server.address)
    eoclient_command = admin_only.script("eoclient")
    run([eoclient_command, "topics", "create", "orders", "--project", "p"], cwd=tmp_path, env=env)
    listed = run(
        [eoclient_command, "topics", "list", "--project", "p", "--format", "json"],
        cwd=tmp_path,
        env=env,
    )
    assert "projects/p/topics/orders" in listed
    done = subprocess.run(
        [eoclient_command, "serve", "--port", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (1, "")
    [line] = done.stderr.splitlines()
    assert line.endswith(SERVER_HINT), line
    assert "click" not in line  # the [cli] extra is there: only the server's part is named


# ============================================================ the wheel with [server]


def _listening_address(process: subprocess.Popen[str], timeout: float) -> str:
    """The gRPC address ``eoclient serve`` announces on stdout."""
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            line = process.stdout.readline()
            if not line:
                break
            seen.append(line)
            found = re.search(r"listening on (\S+) \(gRPC\)", line)
            if found:
                return found.group(1)
    raise AssertionError(f"eoclient serve did not announce its address: {seen!r}")


@pytest.fixture
def wheel_server(served: Venv, tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """``eoclient serve`` run from the [server] wheel's venv: its address and process."""
    process = subprocess.Popen(
        [served.script("eoclient"), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=served.environ(),
    )
    try:
        yield _listening_address(process, timeout=60), process
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


async def test_the_server_wheel_serves(
    served: Venv, wheel_server: tuple[str, subprocess.Popen[str]]
) -> None:
    address, process = wheel_server
    topic = "projects/p/topics/from-the-wheel"
    async with eoclient.AdminClient(address) as admin:
        await admin.create_topic(topic)
        assert [t.name async for t in admin.list_topics("projects/p")] == [topic]
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "shutting down" in out


def test_the_plugin_serves_from_the_server_wheel(served: Venv, tmp_path: Path) -> None:
    done = _pytest(served, _write_project(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout
