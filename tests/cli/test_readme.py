"""The README's command-line example, run line by line against the reference server."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from .support import Eo

README = Path(__file__).parents[2] / "README.md"


def readme_commands() -> list[list[str]]:
    section = README.read_text().split("## The command line", 1)[1]
    found = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert found is not None, "the command-line section of README.md lost its example"
    text = found.group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in text.splitlines()]
    return [c for c in commands if c and c[0] == "eoclient"]


def test_the_readme_example_runs(eo: Eo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "events.jsonl").write_text(
        json.dumps({"data": "shipped", "attributes": {"kind": "event"}, "orderingKey": ""}) + "\n"
    )
    commands = readme_commands()
    assert len(commands) >= 10
    for command in commands:
        args = command[1:]
        if args[0] == "tail":
            # Live until Ctrl-C in the README; here: one message, then stop.
            eo.ok("publish", "orders", "for tail")
            args += ["--limit", "1"]
        eo.ok(*args)  # with the README's two variables set (the ``eo`` fixture)
    listed = eo.json("subscriptions", "list")
    assert [s["name"].rsplit("/", 1)[1] for s in listed] == ["billing"]
