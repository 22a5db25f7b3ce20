"""The SDK imports as the SDK: nothing of the server, the command or Spark, and none of
their dependencies, although this environment has every extra installed; with tracing on,
it loads only what ``eoclient[otel]`` installs.

Each check runs in a fresh interpreter (this one has long since imported everything) and
reads its ``sys.modules``.
"""

# No __init__.py here: a package named "packaging" under tests/ would shadow the packaging
# library for every test (tests/ is on sys.path for the packages beside this folder).

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from eoclient import _extras
from eoclient.pytest_plugin import PubSubServer, TopicFactory

# The SDK's modules: what `pip install eoclient` is for.
SDK_MODULES = (
    "eoclient",
    "eoclient.subscriber",
    "eoclient.publisher",
    "eoclient.admin",
    "eoclient.errors",
    "eoclient._transport",
    "eoclient.delayed_delivery",
)

# Third-party top-level modules the SDK may bring in: its three dependencies and theirs.
ALLOWED_THIRD_PARTY = {
    "grpc",  # grpcio
    "google",  # protobuf (google.protobuf, google._upb), googleapis-common-protos (google.rpc)
    "typing_extensions",  # grpcio's dependency
    # grpcio's own __init__ imports the grpc_tools package where it is installed (to
    # alias it as grpc.tools); the compiler itself (grpc_tools.protoc) must stay out.
    "grpc_tools",
    # protobuf's and grpcio's compiled extensions register these.
    "cython_runtime",
}
ALLOWED_GOOGLE = ("google", "google._upb", "google.protobuf", "google.rpc")

# Never, from the SDK: eoclient's other parts, and what only they need.
SERVER_SIDE = ("eoclient.server_stub", "eoclient.demo", "eoclient.spark")
OTHER_PARTS = (*SERVER_SIDE, "eoclient.cli", "eoclient.pytest_plugin")
DEPENDENCIES_OF_EXTRAS = (
    "aiohttp",
    "click",
    "rich",
    "yaml",
    "fastavro",
    "grpc_tools.protoc",
    "prometheus_client",
    "duckdb",
    "py_mini_racer",
    "pyspark",
    "pyarrow",
    "pandas",
    "numpy",
    "google.auth",
    "google.cloud",
    "google.api_core",
    "requests",
)

PROBE = """
import json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    __import__(name)
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def imported_by(*modules: str) -> list[str]:
    """The modules a fresh interpreter holds after importing ``modules``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *modules],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded: list[str] = json.loads(done.stdout)
    return loaded


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def test_the_sdk_imports_nothing_of_the_server_the_command_or_spark() -> None:
    loaded = imported_by(*SDK_MODULES)
    assert "eoclient.subscriber.client" in loaded  # the probe measured something
    forbidden = (*OTHER_PARTS, *DEPENDENCIES_OF_EXTRAS)
    assert [m for m in loaded if any(_within(m, bad) for bad in forbidden)] == []


def test_the_sdk_imports_only_its_own_dependencies() -> None:
    loaded = imported_by(*SDK_MODULES)
    top_level = {m.split(".")[0] for m in loaded} - set(sys.stdlib_module_names)
    extensions = {m for m in top_level if m.startswith("_cython_")}  # Cython's per-version module
    assert top_level - extensions - {"eoclient"} <= ALLOWED_THIRD_PARTY
    google = [m for m in loaded if _within(m, "google")]
    assert [m for m in google if not any(_within(m, ok) for ok in ALLOWED_GOOGLE)] == []


def test_the_command_module_imports_without_click() -> None:
    # The console script imports eoclient.cli before it can say that click is missing:
    # importing it brings none of the command's dependencies.
    loaded = imported_by("eoclient.cli")
    assert [m for m in loaded if m.split(".")[0] in {"click", "rich", "aiohttp"}] == []


def test_the_pytest_plugin_loads_without_the_server() -> None:
    # pytest loads the plugin in every project that installs eoclient.
    loaded = imported_by("eoclient.pytest_plugin", "eoclient.pytest_plugin._asyncio_fixtures")
    assert "pytest_asyncio" in loaded
    forbidden = (*SERVER_SIDE, *DEPENDENCIES_OF_EXTRAS)
    assert [m for m in loaded if any(_within(m, bad) for bad in forbidden)] == []


@pytest.mark.parametrize("extra", ["cli", "server"])
def test_the_extras_modules_match_pyproject(extra: _extras.Extra) -> None:
    # What the command and the plugin look for is what the extra installs.
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    extras: dict[str, list[str]] = pyproject["project"]["optional-dependencies"]

    def distributions(name: str) -> set[str]:
        found: set[str] = set()
        for line in extras[name]:
            requirement = Requirement(line)
            if requirement.name == "eoclient":
                for included in requirement.extras:
                    found |= distributions(included)
            else:
                found.add(requirement.name)
        return found

    assert set(_extras.EXTRA_MODULES[extra].values()) == distributions(extra)


# Publishes one message with tracing on and prints the file of every module it loaded.
TRACED_PUBLISH = """
import asyncio, json, os, sys
before = set(sys.modules)
import eoclient

async def publish():
    async with eoclient.PublisherClient(enable_open_telemetry_tracing=True) as publisher:
        await publisher.publish(sys.argv[1], b"traced")

asyncio.run(publish())
loaded = {name: getattr(sys.modules[name], "__file__", None) for name in set(sys.modules) - before}
print(json.dumps({name: os.path.normpath(file) for name, file in loaded.items() if file}))
"""


def _installed_closure(requirements: list[Requirement]) -> set[str]:
    """The distributions ``requirements`` bring, transitively, as installed here."""
    found: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        found.add(name)
        todo.extend(Requirement(line) for line in importlib.metadata.requires(name) or [])
    return found


def _owners(files: dict[str, str]) -> dict[str, str]:
    """module -> the installed distribution whose files hold it (absent: none does)."""
    by_top_level = importlib.metadata.packages_distributions()
    candidates = {d for module in files for d in by_top_level.get(module.split(".")[0], [])}
    file_owner: dict[str, str] = {}
    for candidate in candidates:
        distribution = importlib.metadata.distribution(candidate)
        for file in distribution.files or []:
            path = os.path.normpath(distribution.locate_file(file))
            file_owner[path] = canonicalize_name(distribution.metadata["Name"])
    return {module: file_owner[file] for module, file in files.items() if file in file_owner}


def test_tracing_needs_only_what_the_otel_extra_installs(
    pubsub_server: PubSubServer, pubsub_topic_factory: TopicFactory
) -> None:
    # This environment also has opentelemetry-sdk (the tracing tests read its spans), so
    # a traced publish that reached into it, or into a distribution only the SDK brings,
    # would pass every other test and fail for a user who installed eoclient[otel].
    topic = pubsub_topic_factory("traced")
    done = subprocess.run(
        [sys.executable, "-c", TRACED_PUBLISH, topic.name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PUBSUB_EMULATOR_HOST": pubsub_server.address},
    )
    files: dict[str, str] = json.loads(done.stdout)
    assert "eoclient.tracing" in files  # tracing was on
    third_party = {
        module: file
        for module, file in files.items()
        if module.split(".")[0] not in {*sys.stdlib_module_names, "eoclient"}
        and not module.startswith("_cython_")  # Cython's per-version module
        # grpcio imports grpc_tools where installed, as grpc.tools (ALLOWED_THIRD_PARTY).
        and module not in {"grpc_tools", "grpc.tools"}
    }
    owners = _owners(third_party)
    assert sorted(set(third_party) - set(owners)) == []  # each module has an owner
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    project = pyproject["project"]
    allowed = _installed_closure(
        [Requirement(line) for line in project["dependencies"]]
        + [Requirement(line) for line in project["optional-dependencies"]["otel"]]
    )
    assert "opentelemetry-api" in set(owners.values())
    assert sorted({f"{m} ({d})" for m, d in owners.items() if d not in allowed}) == []
