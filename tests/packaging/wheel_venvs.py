"""Build eoclient's sdist and wheel as a release would, and install them into fresh
virtual environments, for the release tests (test_release_wheel.py) and the install
footprint benchmark (benchmarks/install_footprint.py).

Fast and still honest:

* The build runs ``python -m build --no-isolation`` with this environment's setuptools:
  ``build`` still checks that ``[build-system] requires`` is satisfied, and still builds
  the wheel from the sdist (so a file missing from the sdist is missing from the wheel).
  It builds a copy of the checkout's files (tracked and not ignored), never the checkout
  itself, which setuptools would write into (egg-info) while other tests import it.
* The fresh environments get no pip of their own (``venv --without-pip``): this
  environment's pip installs into them (``pip --python``), so what they hold is eoclient
  and what its metadata asks for, and nothing else.
* pip resolves the wheel's own ``Requires-Dist`` (never ``--no-deps``), constrained to
  the versions this environment has: the ones the test suite runs with, which pip's
  cache already holds.
* The tests install with ``--no-compile``: the same files, without the bytecode pip
  would otherwise write for every module up front (half the time of the server's
  install); Python compiles what a test imports when it imports it. The footprint
  benchmark compiles, as a user's install does.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import venv
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Building and installing wait on the registry and on unpacking tens of MB; a loaded
# 2-core machine takes tens of seconds for what takes a few.
STEP_TIMEOUT = 300.0


@dataclass(frozen=True)
class Dist:
    sdist: Path
    wheel: Path


def run(
    command: list[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = STEP_TIMEOUT,
) -> str:
    """Run ``command``; its stdout, or an AssertionError that shows what it printed."""
    done = subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, command))} exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done.stdout


def checkout_copy(into: Path) -> Path:
    """The checkout's tracked and untracked-but-not-ignored files, copied into ``into``
    (what a clone holds, plus files not yet added)."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not copied
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def build(workdir: Path) -> Dist:
    """The sdist, and the wheel built from it, in ``workdir / "dist"``."""
    tree = checkout_copy(workdir / "tree")
    out = workdir / "dist"
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", out, tree])
    [sdist] = out.glob("*.tar.gz")
    [wheel] = out.glob("*.whl")
    return Dist(sdist, wheel)


def constraints(path: Path) -> Path:
    """Pins of this environment's distributions (eoclient's own left out), for ``-c``."""
    pins: dict[str, str] = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        key = name.lower().replace("_", "-")
        if key != "eoclient" and key not in pins:  # first on sys.path wins, as in imports
            pins[key] = f"{name}=={distribution.version}"
    path.write_text("".join(f"{pin}\n" for pin in sorted(pins.values())))
    return path


@dataclass(frozen=True)
class Venv:
    """A fresh virtual environment that this environment's pip installs into."""

    path: Path
    constraints: Path

    @classmethod
    def create(cls, path: Path, constraints: Path) -> Venv:
        venv.create(path, with_pip=False)
        return cls(path, constraints)

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def script(self, name: str) -> Path:
        return self.path / "bin" / name

    def install(self, *requirements: str, compile_bytecode: bool = False) -> None:
        run(
            [
                *(sys.executable, "-m", "pip", "--python", self.python, "install"),
                *("--quiet", "--disable-pip-version-check", "-c", self.constraints),
                *([] if compile_bytecode else ["--no-compile"]),
                *requirements,
            ]
        )

    def distributions(self) -> list[str]:
        """The names of the distributions installed here, sorted."""
        code = (
            "import importlib.metadata as m, json; "
            "print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"
        )
        names: list[str] = json.loads(run([self.python, "-I", "-c", code]))
        return names

    def site_packages_bytes(self) -> int:
        """What the installed distributions take on disk (site-packages, every file)."""
        [site] = self.path.glob("lib/python*/site-packages")
        return sum(
            entry.stat().st_size
            for entry in site.rglob("*")
            if entry.is_file() and not entry.is_symlink()
        )

    def environ(self, **extra: str) -> dict[str, str]:
        """The environment for commands run from this venv: its bin first on PATH,
        nothing of the test run's own Python (PYTHONPATH, a virtualenv) carried over."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.path / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.path)
        env.update(extra)
        return env


def wheel_requirement(wheel: Path, extras: str = "") -> str:
    """``eoclient[extras] @ file:///...whl``: the wheel, with extras, as pip takes it."""
    return f"eoclient{f'[{extras}]' if extras else ''} @ {wheel.resolve().as_uri()}"
