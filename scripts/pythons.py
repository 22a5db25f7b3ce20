"""The SDK's and the server's own tests on the other Pythons eoclient supports.

``./dev test`` runs the whole suite on the Python of ``.venv`` (3.11 unless ``PYTHON=``
says otherwise), then this script: for each of :data:`VERSIONS`, a virtual environment
``.venv-3.12`` / ``.venv-3.13`` with eoclient (editable), the extras those tests import
and the test tools, made once and again when ``pyproject.toml`` changes; then pytest on
:data:`TEST_PATHS` in it, in parallel processes as ``./dev test`` runs the rest.

Usage::

    .venv/bin/python scripts/pythons.py [--versions 3.12,3.13] [PYTEST ARGS...]

An interpreter is found as ``python3.X`` on the PATH, else under pyenv's versions
(``$PYENV_ROOT``, ``~/.pyenv``). Where one is missing the script says so and skips it, or
fails with ``EOCLIENT_REQUIRE_PYTHONS=1`` (``.ci/run`` sets it: CI must not pass because an
interpreter went missing).
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
VERSIONS = ("3.12", "3.13")
# The SDK's tests and the server's: what a user of either runs on their Python. The rest
# (Spark, the docs, packaging, soak, the differential tests with Google's emulator) runs
# on the main interpreter only.
TEST_PATHS = (
    "tests/subscriber",
    "tests/publisher",
    "tests/admin",
    "tests/transport",
    "tests/test_tasks.py",
    "tests/server_stub",
)
EXTRAS = "server,gcp,otel,uvloop"
# Of the dev extra, what TEST_PATHS import besides eoclient and EXTRAS (the versions are
# pyproject's).
TEST_DISTRIBUTIONS = {
    "pytest",
    "pytest-asyncio",
    "pytest-timeout",
    "pytest-xdist",
    "hypothesis",
    "cryptography",
    "opentelemetry-sdk",
    "google-cloud-pubsub",
    "gcp-storage-emulator",
    "google-cloud-storage",
}


def test_requirements() -> list[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = pyproject["project"]["optional-dependencies"]["dev"]
    wanted = [line for line in dev if Requirement(line).name in TEST_DISTRIBUTIONS]
    missing = TEST_DISTRIBUTIONS - {Requirement(line).name for line in wanted}
    if missing:
        raise SystemExit(f"pythons.py: the dev extra no longer lists {sorted(missing)}")
    return wanted


def find_interpreter(version: str) -> str | None:
    """A ``python{version}`` that runs and is that version: pyenv's (the newest patch
    release installed), else the PATH's (a pyenv shim there may only say the version is
    not selected, so each candidate is run)."""
    candidates: list[str] = []
    roots = [os.environ.get("PYENV_ROOT", ""), str(Path.home() / ".pyenv")]
    for root in dict.fromkeys(filter(None, roots)):
        found = glob.glob(f"{root}/versions/{version}.*/bin/python{version}")
        # The newest patch release first: 3.12.10 before 3.12.9.
        candidates += sorted(found, key=_patch_release, reverse=True)
    on_path = shutil.which(f"python{version}")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        ran = subprocess.run(
            [candidate, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        )
        if ran.returncode == 0 and ran.stdout.strip() == version:
            return candidate
    return None


def _patch_release(path: str) -> list[int]:
    release = Path(path).parts[-3]  # .../versions/3.12.1/bin/python3.12
    return [int(n) for n in release.split(".") if n.isdigit()]


def environment(version: str, interpreter: str, requirements: list[str]) -> Path:
    """``.venv-X.Y`` with eoclient and the test requirements, remade when they change."""
    venv = ROOT / f".venv-{version}"
    python = venv / "bin" / "python"
    stamp = venv / ".eoclient-installed"
    want = hashlib.sha256(
        (ROOT / "pyproject.toml").read_bytes() + "\n".join(requirements).encode()
    ).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == want:
        return python
    print(f"pythons.py: setting up {venv.name} ({interpreter})", flush=True)
    if not python.exists():
        subprocess.run([interpreter, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "-e", f".[{EXTRAS}]", *requirements],
        cwd=ROOT,
        check=True,
    )
    stamp.write_text(want)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", default=",".join(VERSIONS))
    options, pytest_args = parser.parse_known_args()
    required = os.environ.get("EOCLIENT_REQUIRE_PYTHONS") == "1"
    requirements = test_requirements()
    failed: list[str] = []
    for version in options.versions.split(","):
        interpreter = find_interpreter(version)
        if interpreter is None:
            print(f"pythons.py: no Python {version} here (python{version}, pyenv)", flush=True)
            if required:
                failed.append(f"{version} (not found)")
            continue
        python = environment(version, interpreter, requirements)
        started = time.monotonic()
        print(f"pythons.py: Python {version}: pytest {' '.join(TEST_PATHS)}", flush=True)
        done = subprocess.run(
            [str(python), "-m", "pytest", "-q", "-n", "auto", *pytest_args, *TEST_PATHS],
            cwd=ROOT,
            check=False,
        )
        took = time.monotonic() - started
        print(f"pythons.py: Python {version}: exit {done.returncode} in {took:.0f} s", flush=True)
        if done.returncode != 0:
            failed.append(version)
    if failed:
        print(f"pythons.py: failed on {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
