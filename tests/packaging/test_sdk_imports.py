"""The SDK imports as the SDK: nothing of the server, the command or Spark, and none of
their dependencies, although this environment has every extra installed.

Each check runs in a fresh interpreter (this one has long since imported everything) and
reads its ``sys.modules``.
"""

# No __init__.py here: a package named "packaging" under tests/ would shadow the packaging
# library for every test (tests/ is on sys.path for the packages beside this folder).

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from eoclient import _extras

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
    "fastavro",
    "grpc_tools.protoc",
    "prometheus_client",
    "pyspark",
    "pyarrow",
    "pandas",
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
