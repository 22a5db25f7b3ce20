"""Which of eoclient's optional parts this environment can run, and the line that says
how to get a missing one.

``pip install eoclient`` is the SDK alone; extras add the rest (pyproject.toml)::

    eoclient[cli]      click, rich, pyyaml: the eoclient command's admin verbs
    eoclient[server]   the command, plus aiohttp, fastavro, grpcio-tools,
                       prometheus-client, duckdb and mini-racer: the reference server
                       (eoclient serve), push, schemas, metrics, message transforms, the
                       dashboard, the BigQuery stand-in and the pytest plugin's server

The entry points that need an extra (the ``eoclient`` command, the pytest plugin) ask
here first, so a missing extra is one line naming the ``pip install`` that brings it,
not an ``ImportError`` traceback from deep inside. Asking imports nothing: each module
is looked up with :func:`importlib.util.find_spec`, which finds it on ``sys.path``
without running it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Literal

__all__ = ["EXTRA_MODULES", "Extra", "install_hint", "missing"]

Extra = Literal["cli", "server"]

# Each extra's top-level modules, mapped to the distributions that install them (the
# names pyproject.toml lists; tests/packaging keeps the two in step).
_CLI_MODULES = {"click": "click", "rich": "rich", "yaml": "pyyaml"}
EXTRA_MODULES: Mapping[Extra, Mapping[str, str]] = {
    "cli": _CLI_MODULES,
    "server": {
        **_CLI_MODULES,
        "aiohttp": "aiohttp",
        "fastavro": "fastavro",
        "grpc_tools": "grpcio-tools",
        "prometheus_client": "prometheus-client",
        "duckdb": "duckdb",
        # Message transforms' JavaScript engine (the transforms extra, part of the server's).
        "py_mini_racer": "mini-racer",
    },
}


def missing(extra: Extra) -> list[str]:
    """The distributions of ``extra`` whose modules cannot be found (empty: all there)."""
    return [
        distribution
        for module, distribution in EXTRA_MODULES[extra].items()
        if importlib.util.find_spec(module) is None
    ]


def install_hint(extra: Extra, what: str) -> str | None:
    """``None`` when ``extra`` is installed; else one line: ``what`` (e.g. "eoclient
    serve") needs it, which distributions are missing, and the command that fixes it."""
    absent = missing(extra)
    if not absent:
        return None
    return (
        f"{what} needs eoclient's {extra} extra, not installed here "
        f"(missing {', '.join(absent)}): pip install 'eoclient[{extra}]'"
    )
