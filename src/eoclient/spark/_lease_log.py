"""A puller's record of the deliveries it holds before they are journaled.

Every puller (the driver's probe, each read task attempt) appends to a log of its own, one
JSON line per event, *before* the event matters:

* ``["sent", n, t]`` before Pull call ``n`` goes out, ``t`` the wall-clock time;
* ``["answered", n, [ack ids]]`` as soon as call ``n``'s answer is decoded.

The log is deleted once what it lists is journaled or given back. If the puller dies first
(kill -9 of an executor or the driver), the log is what a restart (or the settle of that
batch) needs: the answered ack ids are given back at once (modack 0) instead of staying
leased until their deadline, and a call sent but never answered says until when messages
nobody recorded may still be leased (``_decisions.leftovers``). The writes are not fsync'd:
a killed process's writes are in the page cache and survive it; only a machine crash loses
them, and then the deliveries come back when their deadline passes, as they would anyway.
A torn last line (killed mid-write) is ignored: its call then counts as unanswered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


class LeaseLog:
    """The log of one puller (append-only; ``close(delete=True)`` when done)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._calls = 0

    def _write(self, event: list[object]) -> None:
        if self._file is None:
            # Line-buffered: each event reaches the kernel (the page cache) at once.
            self._file = self.path.open("a", buffering=1, encoding="utf-8")
        self._file.write(json.dumps(event, separators=(",", ":")) + "\n")

    def sent(self) -> int:
        """Record a Pull call about to be sent; its number."""
        self._calls += 1
        self._write(["sent", self._calls, time.time()])
        return self._calls

    def answered(self, call: int, ack_ids: Iterable[str]) -> None:
        self._write(["answered", call, list(ack_ids)])

    def close(self, *, delete: bool) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if delete:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


@dataclass(slots=True)
class LeaseRecord:
    """What dead pullers' logs say: ack ids answered, send times of unanswered calls."""

    answered: list[str] = field(default_factory=list)
    unanswered_since: list[float] = field(default_factory=list)
    paths: list[Path] = field(default_factory=list)
    newest_write: float = 0.0


def read_logs(paths: Iterable[Path], *, ack_ids: bool = True) -> LeaseRecord:
    """What the logs at ``paths`` say (a missing one says nothing). ``ack_ids=False`` reads
    only which calls were answered, not their ack ids: a read task's log holds up to a
    Pull's worth of ids per line, and the driver wants only the calls in flight."""
    record = LeaseRecord()
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
            record.newest_write = max(record.newest_write, os.stat(path).st_mtime)
        except FileNotFoundError:
            continue
        record.paths.append(path)
        sent: dict[int, float] = {}
        for line in text.splitlines():
            if not ack_ids and (answered := _ANSWERED.match(line)) is not None:
                if line.endswith("]]"):  # not torn by a kill mid-write
                    sent.pop(int(answered[1]), None)
                continue
            event = _event(line)
            if event is None:
                continue
            if event[0] == "sent":
                sent[int(event[1])] = float(event[2])
            elif event[0] == "answered":
                sent.pop(int(event[1]), None)
                record.answered.extend(str(ack_id) for ack_id in event[2])
        record.unanswered_since.extend(sent.values())
    return record


# The start of an "answered" line: ["answered",<call>,[...
_ANSWERED = re.compile(r'^\["answered",(\d+),')


def _event(line: str) -> list[Any] | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None  # torn by a kill mid-write
    if isinstance(event, list) and len(event) == 3:
        return event
    return None
