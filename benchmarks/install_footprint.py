"""What ``pip install eoclient`` costs beside ``pip install google-cloud-pubsub``: packages,
disk, and the time to import.

Usage::

    .venv/bin/python benchmarks/install_footprint.py [--runs 21]

Builds eoclient's wheel (as tests/packaging does), then makes one fresh venv each for the
bare wheel, ``eoclient[cli]``, ``eoclient[server]`` and ``google-cloud-pubsub``, installed
the same way (this environment's pip, versions pinned to this environment's, no pip of
their own in the venvs, bytecode compiled as pip does by default) and reports, for each:
how many distributions it holds and what its site-packages take on disk; for the two
SDKs, the import time of ``import eoclient`` and ``import google.cloud.pubsub_v1``: the
module's cumulative time from ``python -X importtime`` (the imports alone), and the wall
time of the whole ``python -c "import ..."`` process (what a short script or a CLI
waits), the median of ``--runs`` runs, alternating between the two.

Not a test: nothing here asserts a number. The results go to docs/benchmarks.md by hand.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "packaging"))

from wheel_venvs import Venv, build, constraints, wheel_requirement

MIB = 2**20


def importtime_us(venv: Venv, module: str) -> int:
    """``module``'s cumulative import time in microseconds, from ``-X importtime``."""
    done = subprocess.run(
        [venv.python, "-I", "-X", "importtime", "-c", f"import {module}"],
        capture_output=True,
        text=True,
        check=True,
    )
    pattern = rf"^import time:\s+\d+ \|\s+(\d+) \| {re.escape(module)}$"
    [cumulative] = re.findall(pattern, done.stderr, re.MULTILINE)
    return int(cumulative)


def process_seconds(venv: Venv, module: str) -> float:
    started = time.perf_counter()
    subprocess.run([venv.python, "-I", "-c", f"import {module}"], check=True)
    return time.perf_counter() - started


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="footprint-") as scratch:
        work = Path(scratch)
        dist = build(work)
        pins = constraints(work / "constraints.txt")
        installs = {
            "eoclient (bare wheel)": [wheel_requirement(dist.wheel)],
            "eoclient[cli]": [wheel_requirement(dist.wheel, "cli")],
            "eoclient[server]": [wheel_requirement(dist.wheel, "server")],
            "google-cloud-pubsub": ["google-cloud-pubsub"],
        }
        venvs: dict[str, Venv] = {}
        print("| install | distributions | site-packages MiB |")
        print("|---|---:|---:|")
        for label, requirements in installs.items():
            venv = Venv.create(work / f"venv{len(venvs)}", pins)
            venv.install(*requirements, compile_bytecode=True)  # as a user's install
            venvs[label] = venv
            names = venv.distributions()
            size = venv.site_packages_bytes() / MIB
            print(f"| {label} | {len(names)} | {size:.1f} |")
            print(f"|  | {', '.join(names)} | |", file=sys.stderr)

        sdks = {
            "eoclient": (venvs["eoclient (bare wheel)"], "eoclient"),
            "google-cloud-pubsub": (venvs["google-cloud-pubsub"], "google.cloud.pubsub_v1"),
        }
        imports: dict[str, list[int]] = {label: [] for label in sdks}
        walls: dict[str, list[float]] = {label: [] for label in sdks}
        for _ in range(runs):  # alternating, so a change in load hits both alike
            for label, (venv, module) in sdks.items():
                imports[label].append(importtime_us(venv, module))
                walls[label].append(process_seconds(venv, module))
        print()
        print(f"| import ({runs} runs, median) | -X importtime ms | python -c wall ms |")
        print("|---|---:|---:|")
        for label, (_, module) in sdks.items():
            import_ms = statistics.median(imports[label]) / 1000
            wall_ms = statistics.median(walls[label]) * 1000
            print(f"| `import {module}` ({label}) | {import_ms:.0f} | {wall_ms:.0f} |")
        ratio = statistics.median(imports["google-cloud-pubsub"]) / statistics.median(
            imports["eoclient"]
        )
        print(f"\ngoogle-cloud-pubsub's import takes {ratio:.1f}x eoclient's")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    main(parser.parse_args().runs)
