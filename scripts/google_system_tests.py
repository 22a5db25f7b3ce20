"""Run google-cloud-pubsub's own system tests against ``eoclient serve`` (gRPC and REST).

Usage::

    .venv/bin/python scripts/google_system_tests.py [-- PYTEST_ARGS...]

The tests are those of the installed google-cloud-pubsub's sdist (``tests/system.py``),
fetched from the package registry once into ``~/.cache/eoclient-tests``. Each test runs
with the publisher and subscriber on each transport (``[grpc-rest]`` ...). Their
requirements (psutil, flaky, google-cloud-testutils) are in the ``dev`` extra.

Two adjustments, neither touching the tests: ``PUBSUB_EMULATOR_HOST`` points the gRPC
clients at the server, and a ``conftest.py`` beside ``system.py`` points the REST clients
at the REST door with anonymous credentials — google-cloud-pubsub 2.44 cannot build a
REST client while ``PUBSUB_EMULATOR_HOST`` is set (it hands a gRPC channel to the REST
transport). The tests that need a service account in Google's CI ("Kokoro") skip
themselves. The last recorded run is in docs/compatibility.md.

Not part of ``./dev test``: it takes 5-8 minutes (the tests wait on real timeouts).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
from pathlib import Path

CACHE = Path.home() / ".cache" / "eoclient-tests"
VENV_BIN = Path(sys.executable).parent

SHIM = """\
# Added by eoclient's scripts/google_system_tests.py (not part of the sdist):
# google-cloud-pubsub cannot build a REST client while PUBSUB_EMULATOR_HOST is set (it
# passes a gRPC channel to the REST transport), so REST clients are pointed at the
# server's REST door by client_options, with anonymous credentials.
import os

from google.auth.credentials import AnonymousCredentials
from google.cloud import pubsub_v1

REST = os.environ["EOCLIENT_REST_URL"]


def _wrap(cls):
    original = cls.__init__

    def init(self, *args, **kwargs):
        if kwargs.get("transport") != "rest":
            return original(self, *args, **kwargs)
        saved = os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        try:
            kwargs.setdefault("client_options", {"api_endpoint": REST})
            kwargs.setdefault("credentials", AnonymousCredentials())
            original(self, *args, **kwargs)
        finally:
            if saved is not None:
                os.environ["PUBSUB_EMULATOR_HOST"] = saved

    cls.__init__ = init


_wrap(pubsub_v1.PublisherClient)
_wrap(pubsub_v1.SubscriberClient)
"""

# google.auth.default() must find *some* credentials for the tests' project fixture;
# nothing is ever sent to Google (the clients talk to the local server only).
FAKE_CREDENTIALS = (
    '{"type": "authorized_user", "client_id": "x", "client_secret": "y", "refresh_token": "z"}'
)


def _sdist() -> Path:
    """The extracted sdist of the installed google-cloud-pubsub (downloaded once)."""
    version = importlib.metadata.version("google-cloud-pubsub")
    root = CACHE / f"google_cloud_pubsub-{version}"
    if not (root / "tests" / "system.py").exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as download:
            subprocess.run(
                [
                    str(VENV_BIN / "python"),
                    "-m",
                    "pip",
                    "download",
                    "--quiet",
                    "--no-deps",
                    "--no-binary",
                    ":all:",
                    f"google-cloud-pubsub=={version}",
                    "-d",
                    download,
                ],
                check=True,
            )
            [archive] = Path(download).glob("*.tar.gz")
            with tarfile.open(archive) as tar:
                tar.extractall(CACHE, filter="data")
    (root / "tests" / "conftest.py").write_text(SHIM)
    return root


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    options = parser.parse_args()
    root = _sdist()
    grpc_port, rest_port = _free_port(), _free_port()
    server = subprocess.Popen(
        [
            str(VENV_BIN / "eoclient"),
            "serve",
            "--port",
            str(grpc_port),
            "--rest-port",
            str(rest_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert server.stdout is not None
        output = []
        for line in server.stdout:  # wait for the server's banner
            output.append(line)
            if line.startswith("REST/JSON on"):
                break
        else:
            raise SystemExit("eoclient serve exited before it was ready:\n" + "".join(output))
        # Keep draining the server's output: a full pipe would block its logging, and
        # with it the server, in the middle of the tests.
        threading.Thread(target=server.stdout.read, daemon=True).start()
        with tempfile.NamedTemporaryFile("w", suffix=".json") as credentials:
            credentials.write(FAKE_CREDENTIALS)
            credentials.flush()
            env = {
                **os.environ,
                "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{grpc_port}",
                "EOCLIENT_REST_URL": f"http://127.0.0.1:{rest_port}",
                "GOOGLE_CLOUD_PROJECT": "system-tests",
                "GOOGLE_APPLICATION_CREDENTIALS": credentials.name,
            }
            result = subprocess.run(
                [
                    str(VENV_BIN / "python"),
                    "-m",
                    "pytest",
                    "tests/system.py",
                    "-q",
                    "-rs",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:randomly",
                    "-W",
                    "ignore::DeprecationWarning",
                    *options.pytest_args,
                ],
                cwd=root,
                env=env,
                check=False,
                capture_output=True,
                text=True,
            )
        print(result.stdout[-6000:])
        print(result.stderr[-2000:], file=sys.stderr)
        # pytest's last line: "60 passed, 20 skipped in 456.73s" (with -q, no "=" rule).
        summary = re.findall(r"^=*\s*(\d+ \w+.*?) in [\d.]+s", result.stdout, re.MULTILINE)
        print(f"google-cloud-pubsub system tests against eoclient serve: {summary[-1:]}")
        return result.returncode
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
