"""Printing: rich tables for people, JSON for scripts (``--format json``), notes on stderr.

Standard output carries only the result (a table, a JSON document, or JSON lines for
a stream), so ``--format json`` output can be piped straight into ``jq``. Progress,
notes and errors go to standard error. Payloads and names are printed as plain
``Text``, never as rich markup, so a message containing ``[bold]`` prints as it is.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeVar

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from eoclient.cli.views import Column

T = TypeVar("T")
Format = Literal["table", "json"]
FORMATS: tuple[Format, ...] = ("table", "json")

# Rich wraps to the terminal's width; into a pipe or file there is no width to respect,
# and a wrapped cell would split a name across lines for grep and cut, so lines are
# left whole there.
UNWRAPPED_WIDTH = 100_000


def _console(stderr: bool) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else UNWRAPPED_WIDTH
    return Console(stderr=stderr, width=width, highlight=False, soft_wrap=False)


class Output:
    """Where one invocation prints; ``json`` says which of the two forms is wanted."""

    def __init__(self, format: Format) -> None:
        self.format = format
        self.json = format == "json"
        self.console = _console(stderr=False)
        self.errors = _console(stderr=True)

    # ------------------------------------------------------------ scripts

    def document(self, value: Any) -> None:
        """One JSON document (an object or a list), indented."""
        click.echo(json.dumps(value, indent=2, ensure_ascii=False))

    def json_line(self, value: Any) -> None:
        """One JSON value on one line (a stream of results, e.g. ``tail``), flushed."""
        click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
        sys.stdout.flush()

    # ------------------------------------------------------------ either

    def done(self, verb: str, kind: str, name: str, record: Any) -> None:
        """An action without a resource to show: ``deleted topic projects/p/topics/t``."""
        if self.json:
            self.document(record)
        else:
            self.line(f"{verb} {kind} {name}")

    # ------------------------------------------------------------ people

    def line(self, text: str) -> None:
        self.console.print(Text(text))

    def note(self, text: str) -> None:
        """A remark for people (stderr), e.g. "no topics in projects/p"."""
        self.errors.print(Text(text))

    def fields(self, rows: Iterable[tuple[str, str]]) -> None:
        """A two-column table of a resource's fields (describe, create, update)."""
        table = _table()
        table.show_header = False
        table.add_column("FIELD", style="bold")
        table.add_column("VALUE")
        for name, value in rows:
            table.add_row(Text(name), Text(value))
        self.console.print(table)

    def rows(self, items: Sequence[T], columns: Sequence[Column[T]]) -> None:
        """One row per item (list)."""
        table = _table()
        for column in columns:
            table.add_column(column.header)
        for item in items:
            table.add_row(*(Text(column.show(item)) for column in columns))
        self.console.print(table)


def _table() -> Table:
    # gcloud's and kubectl's look: a header row, columns two spaces apart, no borders.
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold")
