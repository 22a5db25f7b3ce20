"""Run Google's python-pubsub samples (``samples/snippets``) against ``eoclient serve``.

Usage::

    .venv/bin/python scripts/google_samples.py [--samples DIR] [-- PYTEST_ARGS...]

The samples are not in any package: they live in the googleapis/python-pubsub repository,
which this machine's CI cannot reach. Give a local copy with ``--samples`` (a checkout of
the repository, or its ``samples/snippets`` directory), or put one at
``~/.cache/eoclient-tests/python-pubsub`` (``EOCLIENT_SAMPLES`` names another place).

What the tests need, and how the script provides it:

* their own requirements (``requirements.txt`` and ``requirements-test.txt``: the pinned
  google-cloud-pubsub, google-cloud-storage, google-cloud-bigquery, avro, backoff, flaky,
  mock, pytest), installed from the package registry once into a virtualenv of their own in
  ``~/.cache/eoclient-tests`` (keyed by the requirements' hash), so the samples run with the
  versions Google pins, not with this project's;
* ``GOOGLE_CLOUD_PROJECT`` (every test reads it) and ``PUBSUB_EMULATOR_HOST`` (the clients
  then use plain gRPC to the server, with no credentials);
* a Cloud Storage API for the Cloud Storage subscription test's bucket fixture and for
  Cloud Storage ingestion: ``gcp-storage-emulator`` (from the registry, into the same
  virtualenv) on a free port, named by ``STORAGE_EMULATOR_HOST`` to the tests and to the
  server alike;
* credentials ``google.auth.default()`` can find: a dummy file (nothing is sent to Google).

The BigQuery subscription test is deselected: its fixture creates a dataset and a table in
real BigQuery (``bigquery.Client()``), which no local server stands in for. Nothing else
leaves this machine: the push tests create subscriptions to ``https://PROJECT.appspot.com``
endpoints but delete them before any message is published to their topic.

The last recorded run is in docs/compatibility.md. Not part of ``./dev test`` (about two
minutes once the virtualenv exists; the tests wait on real timeouts).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import venv
from pathlib import Path

CACHE = Path.home() / ".cache" / "eoclient-tests"
VENV_BIN = Path(sys.executable).parent
PROJECT = "eoclient-samples"
TEST_FILES = (
    "publisher_test.py",
    "subscriber_test.py",
    "schema_test.py",
    "iam_test.py",
    "quickstart/quickstart_test.py",
)
# Needs real BigQuery (see the module docstring).
DESELECTED = ("subscriber_test.py::test_create_bigquery_subscription",)
STORAGE_EMULATOR = "gcp-storage-emulator"
# google.auth.default() must find *some* credentials; the clients talk to the local
# servers only.
FAKE_CREDENTIALS = (
    '{"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"}'
)


def _snippets(given: str | None) -> Path:
    """The ``samples/snippets`` directory of the local copy."""
    candidates = [Path(given)] if given else []
    if not given:
        candidates.append(Path(os.environ.get("EOCLIENT_SAMPLES", CACHE / "python-pubsub")))
    for root in candidates:
        for snippets in (root, root / "samples" / "snippets"):
            if (snippets / "publisher_test.py").is_file():
                return snippets.resolve()
    raise SystemExit(
        "no copy of googleapis/python-pubsub's samples found (looked in "
        f"{', '.join(str(c) for c in candidates)}): clone the repository there, or pass "
        "--samples DIR"
    )


def _samples_venv(snippets: Path) -> Path:
    """A virtualenv with the samples' pinned requirements and the storage emulator."""
    requirements = [snippets / "requirements.txt", snippets / "requirements-test.txt"]
    digest = hashlib.sha256()
    for path in requirements:
        digest.update(path.read_bytes())
    digest.update(sys.version.encode())
    home = CACHE / f"samples-venv-{digest.hexdigest()[:12]}"
    python = home / "bin" / "python"
    done = home / ".installed"
    if not done.exists():
        print(f"installing the samples' requirements into {home} (once)", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        args = [str(python), "-m", "pip", "install", "--quiet", STORAGE_EMULATOR]
        for path in requirements:
            args += ["-r", str(path)]
        subprocess.run(args, check=True)
        done.write_text("\n".join(str(p) for p in requirements))
    return home


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_for_port(port: int, process: subprocess.Popen[str], what: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"{what} exited before it was ready")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{what} did not open port {port} within 30 s")


def _drain(process: subprocess.Popen[str]) -> None:
    # Keep reading a child's output: a full pipe would block its logging, and with it
    # the child, in the middle of the tests.
    assert process.stdout is not None
    threading.Thread(target=process.stdout.read, daemon=True).start()


def _start_storage_emulator(home: Path) -> tuple[subprocess.Popen[str], str]:
    port = _free_port()
    process = subprocess.Popen(
        [
            str(home / "bin" / STORAGE_EMULATOR),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _drain(process)
    _wait_for_port(port, process, STORAGE_EMULATOR)
    return process, f"http://127.0.0.1:{port}"


def _start_server(storage: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    grpc_port, rest_port = _free_port(), _free_port()
    out = log.open("w")
    server = subprocess.Popen(
        [
            str(VENV_BIN / "eoclient"),
            "serve",
            "--port",
            str(grpc_port),
            "--rest-port",
            str(rest_port),
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "STORAGE_EMULATOR_HOST": storage},
    )
    _wait_for_port(rest_port, server, "eoclient serve")
    return server, f"127.0.0.1:{grpc_port}"


def _stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--samples", help="a copy of python-pubsub, or its samples/snippets")
    parser.add_argument("--server-log", default=None, help="keep the server's output in this file")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    options = parser.parse_args()
    snippets = _snippets(options.samples)
    home = _samples_venv(snippets)
    with tempfile.TemporaryDirectory(prefix="eoclient-samples-") as scratch:
        log = Path(options.server_log or Path(scratch) / "server.log")
        storage, storage_url = _start_storage_emulator(home)
        try:
            server, address = _start_server(storage_url, log)
            try:
                credentials = Path(scratch) / "credentials.json"
                credentials.write_text(FAKE_CREDENTIALS)
                env = {
                    **os.environ,
                    "PUBSUB_EMULATOR_HOST": address,
                    "STORAGE_EMULATOR_HOST": storage_url,
                    "GOOGLE_CLOUD_PROJECT": PROJECT,
                    "GOOGLE_APPLICATION_CREDENTIALS": str(credentials),
                }
                deselect = [arg for name in DESELECTED for arg in ("--deselect", name)]
                result = subprocess.run(
                    [
                        str(home / "bin" / "python"),
                        "-m",
                        "pytest",
                        *TEST_FILES,
                        "-q",
                        "-rfE",
                        "-p",
                        "no:cacheprovider",
                        "-W",
                        "ignore::DeprecationWarning",
                        *deselect,
                        *options.pytest_args,
                    ],
                    cwd=snippets,
                    env=env,
                    check=False,
                    capture_output=True,
                    text=True,
                )
            finally:
                _stop(server)
        finally:
            _stop(storage)
        print(result.stdout[-12000:])
        print(result.stderr[-3000:], file=sys.stderr)
        if result.returncode != 0:
            print(f"the server's log: {log}" if options.server_log else log.read_text()[-4000:])
    # pytest's last line: "70 passed, 1 deselected in 96.12s" (with -q, no "=" rule).
    summary = re.findall(r"^=*\s*(\d+ \w+.*?) in [\d.]+s", result.stdout, re.MULTILINE)
    print(f"Google's python-pubsub samples against eoclient serve: {summary[-1:]}")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
