"""The lease journal of a durable server's exports: which ack ids a batch holds, so that a
server killed before the batch's object was complete gives them back at once when it starts
again on its data directory (docs/protocol.md#exports-after-a-crash).

Without it the messages would still be exported again, but only once their leases ran out,
up to ten minutes later (a batch's leases are extended to cover it until it is written). A
journal file per batch, ``<id>.leases`` in the exports' work directory: the subscription's
name on the first line, then each pulled chunk's ack ids on a line, separated by spaces
(written and flushed as they are pulled; a torn last line only names ids whose leases run
out by themselves). The file goes when the batch is acknowledged or given back.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

SUFFIX = ".leases"


class LeaseJournal:
    """The journal file of one batch."""

    def __init__(self, path: Path, subscription: str) -> None:
        self.path = path
        self._out: BinaryIO | None = open(path, "ab")  # noqa: SIM115 - closed by remove()
        self._out.write(subscription.encode() + b"\n")
        self._out.flush()

    def add(self, ack_ids: Sequence[str]) -> None:
        if self._out is not None and ack_ids:
            self._out.write(" ".join(ack_ids).encode() + b"\n")
            self._out.flush()

    def remove(self) -> None:
        if self._out is not None:
            self._out.close()
            self._out = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def leftovers(directory: Path) -> Iterator[tuple[Path, str, list[str]]]:
    """Each journal left in ``directory``: its path, subscription and ack ids."""
    for path in sorted(directory.glob(f"*{SUFFIX}")):
        try:
            lines = path.read_bytes().decode(errors="replace").splitlines()
        except OSError:
            continue
        if not lines:
            yield path, "", []
            continue
        ids = [ack_id for line in lines[1:] for ack_id in line.split()]
        yield path, lines[0], ids
