"""The source's journal: one Arrow IPC file per offset range, written atomically.

``batch-<start>-<end>.arrow`` holds the rows with ``start <= seq < end``, in seq order, so a
replay of ``(start, end)`` after a restart gives exactly the same rows (spark-notes §4,
option A). Files are written to a temporary name, fsync'd, renamed and the directory fsync'd:
a file that exists is complete.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc

# The rows of the DataFrame (the order and types Spark expects: to_arrow_schema(SCHEMA)), the
# dense sequence number that offsets count, and the ack id of the delivery that was journaled
# (after a restart, the journaled messages are acked and leased with it, no redelivery needed).
ROW_FIELDS = [
    pa.field("message_id", pa.string()),
    pa.field("data", pa.binary()),
    pa.field("attributes", pa.map_(pa.string(), pa.string())),
    pa.field("ordering_key", pa.string()),
    pa.field("publish_time", pa.timestamp("us", tz="UTC")),
    pa.field("delivery_attempt", pa.int32()),
]
JOURNAL_SCHEMA = pa.schema(
    [*ROW_FIELDS, pa.field("seq", pa.int64()), pa.field("ack_id", pa.string())]
)
ROW_SCHEMA = pa.schema(ROW_FIELDS)

_BATCH = re.compile(r"^batch-(\d{20})-(\d{20})\.arrow$")
EPOCH_FILE = "epoch.json"
STATE_FILE = "state.json"


@dataclass(frozen=True, slots=True)
class JournalFile:
    start: int
    end: int
    path: Path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


class Journal:
    """The files under one journal directory (driver side)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    # -------------------------------------------------------------- epoch and state

    def epoch(self) -> str:
        """The journal's id, created once: it ties the journal to one checkpoint's offsets."""
        path = self.directory / EPOCH_FILE
        if not path.exists():
            _atomic_write(path, json.dumps({"epoch": uuid.uuid4().hex}).encode())
        return str(json.loads(path.read_text())["epoch"])

    def has_history(self) -> bool:
        """Whether an earlier run left batches or state here (this run is a restart)."""
        return bool(self.files()) or (self.directory / STATE_FILE).exists()

    def load_state(self) -> dict[str, Any]:
        path = self.directory / STATE_FILE
        if not path.exists():
            return {"pending": {}}
        state: dict[str, Any] = json.loads(path.read_text())
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        _atomic_write(self.directory / STATE_FILE, json.dumps(state, sort_keys=True).encode())

    # -------------------------------------------------------------------- batches

    def files(self) -> list[JournalFile]:
        found = []
        for entry in self.directory.iterdir():
            match = _BATCH.match(entry.name)
            if match:
                found.append(JournalFile(int(match[1]), int(match[2]), entry))
        return sorted(found, key=lambda f: f.start)

    def starting_at(self, start: int) -> JournalFile | None:
        return next((f for f in self.files() if f.start == start), None)

    def write(self, start: int, rows: pa.Table) -> JournalFile:
        end = start + rows.num_rows
        path = self.directory / f"batch-{start:020d}-{end:020d}.arrow"
        sink = pa.BufferOutputStream()
        with pyarrow.ipc.new_file(sink, JOURNAL_SCHEMA) as writer:
            writer.write_table(rows)
        _atomic_write(path, sink.getvalue().to_pybytes())
        return JournalFile(start, end, path)

    def covering(self, start: int, end: int) -> list[JournalFile]:
        """The files that hold exactly ``[start, end)``; raises if any row is missing."""
        chosen = [f for f in self.files() if f.start < end and f.end > start]
        position = start
        for f in chosen:
            if f.start > position:
                break
            position = max(position, f.end)
        if position < end:
            raise RuntimeError(
                f"the journal in {self.directory} does not hold seq {position}..{end}: was it "
                "deleted, or does it belong to another checkpoint?"
            )
        return chosen

    def prune(self, upto: int) -> None:
        """Delete the files whose rows all have ``seq < upto`` (committed and acked)."""
        for f in self.files():
            if f.end <= upto:
                with contextlib.suppress(FileNotFoundError):
                    f.path.unlink()


def read_table(path: str) -> pa.Table:
    """A whole journal file (executor side: memory-mapped, nothing else loaded)."""
    with pa.memory_map(path) as source:
        return pyarrow.ipc.open_file(source).read_all()
