"""Appending a benchmark run's table to docs/benchmarks.md (each benchmark's ``--write``)."""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def append_run(title: str, lines: list[str], load_before: float, load_after: float) -> None:
    """A heading naming ``title``, today, the commit, the command as run and the load
    average around it, then ``lines`` (the run's table)."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    command = " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]])
    heading = (
        f"\n### {title}, {datetime.date.today()} at {commit} (`{command}`, load average "
        f"{load_before:.1f} before, {load_after:.1f} after)\n\n"
    )
    with DOCS.open("a") as docs:
        docs.write(heading + "\n".join(lines) + "\n")
