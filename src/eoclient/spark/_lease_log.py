"""A puller's record of the deliveries it holds before they are journaled.

Every puller (the driver's probe, each read task attempt) appends to a log of its own, one
line per event, *before* the event matters:

* ``["sent", n, t]`` (JSON) before Pull call ``n`` goes out, ``t`` the wall-clock time;
* ``answered n length id id ...`` as soon as call ``n``'s answer is decoded: its ack ids
  joined by spaces, ``length`` characters of them (a torn line is shorter). JSON-encoding
  a response's ack ids (escaping every character) cost ~0.07 µs a message, joining them
  ~0.01. Ack ids holding a space, a line break or a non-ASCII character are written as
  JSON, ``["answered", n, [ack ids]]``, the form every such line had before (both are
  read).

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from eoclient._clock import Clock, SystemClock


class LeaseLog:
    """The log of one puller (append-only; ``close(delete=True)`` when done). Send times
    are read from ``clock``: wall-clock seconds, which another process compares."""

    def __init__(self, path: Path, clock: Clock | None = None) -> None:
        self.path = path
        self.clock = clock or SystemClock()
        self._file: IO[str] | None = None
        self._calls = 0

    def _write_line(self, line: str) -> None:
        if self._file is None:
            # Line-buffered: each event reaches the kernel (the page cache) at once.
            self._file = self.path.open("a", buffering=1, encoding="utf-8")
        self._file.write(line)

    def _write(self, event: list[object]) -> None:
        self._write_line(json.dumps(event, separators=(",", ":")) + "\n")

    def sent(self) -> int:
        """Record a Pull call about to be sent; its number."""
        self._calls += 1
        self._write(["sent", self._calls, self.clock.now()])
        return self._calls

    def answered(self, call: int, ack_ids: Sequence[str]) -> None:
        joined = " ".join(ack_ids)
        # ASCII (a flag of the string: no scan), like the JSON lines: a kill cannot tear a
        # character, and a torn line is shorter than its length.
        if (
            ack_ids
            and joined.isascii()
            and joined.count(" ") == len(ack_ids) - 1
            and "\n" not in joined
        ):
            self._write_line(f"{_ANSWERED_IDS} {call} {len(joined)} {joined}\n")
        else:
            self._write(["answered", call, list(ack_ids)])

    def move(self, path: Path) -> None:
        """Rename the log to ``path`` (atomic; it goes on from there, its open file too);
        ``FileNotFoundError`` if another process moved it first: then it is theirs."""
        if self._file is not None:
            self._file.flush()
        os.rename(self.path, path)
        self.path = path

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
        # Split on line feeds only: an ack id in the joined form may hold any other
        # character (JSON lines escape every control character).
        for line in text.split("\n"):
            if line.startswith(_ANSWERED_IDS):
                joined = _joined_answer(line)
                if joined is not None:  # else torn by a kill mid-write
                    sent.pop(joined[0], None)
                    if ack_ids:
                        record.answered.extend(joined[1].split(" "))
                continue
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


# The start of an "answered" line in JSON: ["answered",<call>,[...
_ANSWERED = re.compile(r'^\["answered",(\d+),')
# The first word of an "answered" line of joined ack ids.
_ANSWERED_IDS = "answered"


def _joined_answer(line: str) -> tuple[int, str] | None:
    """``answered <call> <length> <ids>``: the call and its ids joined by spaces, or
    ``None`` if the line is torn (shorter than its length says)."""
    fields = line.split(" ", 3)
    if len(fields) != 4 or not fields[1].isdigit() or not fields[2].isdigit():
        return None
    if len(fields[3]) != int(fields[2]):
        return None
    return int(fields[1]), fields[3]


def _event(line: str) -> list[Any] | None:
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None  # torn by a kill mid-write
    if isinstance(event, list) and len(event) == 3:
        return event
    return None
