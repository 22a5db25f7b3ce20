"""Fixtures for the ``eoclient`` command's tests.

* ``cli_server`` (session): the reference server in a thread (``ServerThread``), so the
  command — which runs its own ``asyncio.run`` — can be invoked in-process.
* ``project`` (function): a project id no other test uses, so listings see only what
  this test made.
* ``eo``: runs ``eoclient ARGS...`` in-process with click's ``CliRunner`` against
  ``cli_server``, with ``PUBSUB_EMULATOR_HOST`` and ``PUBSUB_PROJECT_ID`` set as a user
  of the emulator would set them.
* ``no_credentials``: Application Default Credentials find none, so a TLS endpoint is
  refused by google-auth before anything is sent (nothing leaves this machine).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from eoclient.pytest_plugin import ServerThread

from .support import Eo


@pytest.fixture(scope="session")
def cli_server() -> Iterator[ServerThread]:
    with ServerThread() as server:
        yield server


@pytest.fixture
def project() -> str:
    return f"cli-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def eo(cli_server: ServerThread, project: str) -> Eo:
    return Eo(cli_server.address, project)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No credentials anywhere; returns the missing key file ADC is pointed at."""
    missing = tmp_path / "missing.json"
    monkeypatch.setenv("HOME", str(tmp_path))  # no gcloud user credentials
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(missing))
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:1")  # no metadata server either
    monkeypatch.setenv("NO_GCE_CHECK", "True")
    return missing
