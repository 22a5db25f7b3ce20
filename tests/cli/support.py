"""Helpers of the ``eoclient`` command's tests (the fixtures are in conftest.py)."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner, Result

from eoclient.cli import cli


class Eo:
    """``eo("topics", "list")`` → click's Result; ``eo.ok(...)`` / ``eo.json(...)`` /
    ``eo.fails(...)`` also check how it ended."""

    def __init__(self, endpoint: str, project: str) -> None:
        self.endpoint = endpoint
        self.project = project
        self.env = {"PUBSUB_EMULATOR_HOST": endpoint, "PUBSUB_PROJECT_ID": project}

    def __call__(self, *args: str, input: str | bytes | None = None) -> Result:
        runner = CliRunner(env=self.env)
        return runner.invoke(cli, list(args), input=input, catch_exceptions=False)

    def ok(self, *args: str, input: str | bytes | None = None) -> Result:
        result = self(*args, input=input)
        assert result.exit_code == 0, f"exit {result.exit_code}: {result.stderr}"
        return result

    def json(self, *args: str, input: str | bytes | None = None) -> Any:
        return json.loads(self.ok(*args, "--format", "json", input=input).stdout)

    def fails(self, *args: str, code: int = 1, input: str | None = None) -> str:
        """Run a command that must fail: exit ``code``, one line on stderr, no traceback,
        nothing on stdout. Returns that line."""
        result = self(*args, input=input)
        assert result.exit_code == code, (result.exit_code, result.stdout, result.stderr)
        assert result.stdout == "", result.stdout
        assert_one_line_error(result.stderr)
        return result.stderr.strip()


def assert_one_line_error(stderr: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    assert lines[0].startswith("eoclient"), stderr
