"""The source's journal: per batch, the plan and one Arrow file per part, written atomically.

Layout (``journalPath``; it belongs to one checkpoint)::

    epoch.json                    the journal's id, in every offset (ties it to a checkpoint)
    state.json                    {"settled": S, "pending": {message id: since}}: batches
                                  < S are acked and pruned; pending = committed, ack
                                  unconfirmed (a redelivery is acked, not emitted)
    driver-<run>.log              the driver's lease log (``_lease_log``), per run
    batch-<k>/plan.json           {"quotas": [...], "cutoff_ns", "ack_deadline", "pending",
                                  "unsettled"}: written before latestOffset returns k + 1
    batch-<k>/part-00000.arrow    the driver's probe pull
    batch-<k>/part-<i>.arrow      read task i's pull (i >= 1)
    batch-<k>/part-<i>.<attempt>.log   a read task attempt's lease log, until it journals

A part file holds ``WIRE_SCHEMA`` rows: first the ``emitted`` rows Spark gets (schema
metadata ``emitted``), then ack-only rows: redeliveries of messages another part of the
batch holds, whose ack ids are acked with the batch. Its metadata ``leased_until`` is when
the leases of its deliveries end (the puller's wall clock), for the driver's lease task.

Every file is written to a temporary name, fsync'd, and then put in place atomically: the
plan and state with ``rename`` (a rewrite replaces them), a part with ``link``, which fails
if the name exists: two attempts racing for one part (a retry and a straggler, a
speculative copy) cannot both win; the loser gives its messages back and replays the
winner's file. The journal must be a POSIX file system path that the driver and every
executor see at the same path (local disk for ``local[*]``; a shared mount such as NFS on a
cluster): Python read tasks cannot reach Spark's Hadoop file systems (``hdfs://``,
``s3a://``), which ``_options`` refuses with a clear error.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.ipc

from eoclient.spark._schema import ROW_SCHEMA, WIRE_SCHEMA

EPOCH_FILE = "epoch.json"
STATE_FILE = "state.json"
PLAN_FILE = "plan.json"
_BATCH = re.compile(r"^batch-(\d{20})$")
_PART = re.compile(r"^part-(\d{5})\.arrow$")
_ATTEMPT_LOG = re.compile(r"^part-(\d{5})\.[0-9a-f]+\.log$")
_DRIVER_LOG = re.compile(r"^driver-[0-9a-f]+\.log$")


def local_path(journal_path: str) -> Path:
    """``journalPath`` (checked by ``_options.check_journal_path``) as a local path."""
    return Path(journal_path.removeprefix("file://"))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temporary(directory: Path, name: str, data: bytes) -> Path:
    tmp = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    with tmp.open("wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    return tmp


def atomic_replace(path: Path, data: bytes) -> None:
    tmp = _write_temporary(path.parent, path.name, data)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def atomic_create(path: Path, data: bytes) -> bool:
    """Put ``data`` at ``path`` unless a file is there already; whether this call did."""
    tmp = _write_temporary(path.parent, path.name, data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        tmp.unlink()
    _fsync_dir(path.parent)
    return True


@dataclass(frozen=True, slots=True)
class Plan:
    """How batch ``k`` is read: the probe part (0), then ``len(quotas)`` read tasks."""

    quotas: tuple[int, ...]
    cutoff_ns: int | None
    ack_deadline: float
    pending: tuple[str, ...]  # committed, ack unconfirmed, when the batch was planned
    unsettled: tuple[int, ...]  # committed batches whose acks were under way then

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "quotas": list(self.quotas),
                "cutoff_ns": self.cutoff_ns,
                "ack_deadline": self.ack_deadline,
                "pending": list(self.pending),
                "unsettled": list(self.unsettled),
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        raw = json.loads(data)
        return cls(
            tuple(raw["quotas"]),
            raw["cutoff_ns"],
            float(raw["ack_deadline"]),
            tuple(raw["pending"]),
            tuple(raw["unsettled"]),
        )


@dataclass(frozen=True, slots=True)
class Part:
    """A journaled part: its rows and what the driver needs to lease and ack them."""

    batch: int
    index: int
    table: pa.Table
    emitted: int
    leased_until: float

    @property
    def group(self) -> str:
        return f"{self.batch}/{self.index}"


def encode_part(rows: pa.Table, ack_only: pa.Table, leased_until: float) -> bytes:
    """A part file's bytes: ``rows`` (emitted) then ``ack_only`` rows (WIRE_SCHEMA)."""
    schema = WIRE_SCHEMA.with_metadata(
        {"emitted": str(rows.num_rows), "leased_until": repr(leased_until)}
    )
    sink = pa.BufferOutputStream()
    with pyarrow.ipc.new_file(sink, schema) as writer:
        for table in (rows, ack_only):
            if table.num_rows:
                writer.write_table(table.cast(WIRE_SCHEMA))
    return bytes(sink.getvalue())


def _read_part(path: Path, batch: int, index: int, columns: list[str] | None = None) -> Part:
    with pa.memory_map(str(path)) as source:
        reader = pyarrow.ipc.open_file(source)
        metadata = reader.schema.metadata or {}
        table = reader.read_all()
    if columns is not None:
        table = table.select(columns)
    return Part(
        batch,
        index,
        table,
        int(metadata[b"emitted"]),
        float(metadata[b"leased_until"]),
    )


class Journal:
    """The files under one journal directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    # --------------------------------------------------------------- epoch, state

    def epoch(self) -> str:
        """The journal's id, created once: it ties the journal to one checkpoint's offsets."""
        path = self.directory / EPOCH_FILE
        if not path.exists():
            atomic_create(path, json.dumps({"epoch": uuid.uuid4().hex}).encode())
        return str(json.loads(path.read_text())["epoch"])

    def load_state(self) -> dict[str, Any]:
        path = self.directory / STATE_FILE
        if not path.exists():
            return {"settled": 0, "pending": {}}
        state: dict[str, Any] = json.loads(path.read_text())
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_replace(self.directory / STATE_FILE, json.dumps(state, sort_keys=True).encode())

    def driver_logs(self) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if _DRIVER_LOG.match(p.name))

    def new_driver_log(self) -> Path:
        return self.directory / f"driver-{uuid.uuid4().hex}.log"

    # -------------------------------------------------------------------- batches

    def batch_dir(self, batch: int) -> Path:
        return self.directory / f"batch-{batch:020d}"

    def batches(self) -> list[int]:
        return sorted(
            int(match[1]) for p in self.directory.iterdir() if (match := _BATCH.match(p.name))
        )

    def plan(self, batch: int) -> Plan | None:
        try:
            return Plan.from_json((self.batch_dir(batch) / PLAN_FILE).read_bytes())
        except FileNotFoundError:
            return None

    def write_plan(self, batch: int, plan: Plan) -> None:
        directory = self.batch_dir(batch)
        directory.mkdir(exist_ok=True)
        atomic_replace(directory / PLAN_FILE, plan.to_json())

    def prune(self, batch: int) -> None:
        shutil.rmtree(self.batch_dir(batch), ignore_errors=True)

    # ---------------------------------------------------------------------- parts

    def part_path(self, batch: int, index: int) -> Path:
        return self.batch_dir(batch) / f"part-{index:05d}.arrow"

    def attempt_log(self, batch: int, index: int) -> Path:
        return self.batch_dir(batch) / f"part-{index:05d}.{uuid.uuid4().hex}.log"

    def attempt_logs(self, batch: int) -> list[Path]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(p for p in self.batch_dir(batch).iterdir() if _ATTEMPT_LOG.match(p.name))
        return []

    def part_indexes(self, batch: int) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(
                int(match[1])
                for p in self.batch_dir(batch).iterdir()
                if (match := _PART.match(p.name))
            )
        return []

    def claim(self, batch: int, index: int, data: bytes) -> bool:
        """Journal a part unless another attempt did; whether this one did."""
        return atomic_create(self.part_path(batch, index), data)

    def read_part(self, batch: int, index: int, columns: list[str] | None = None) -> Part:
        return _read_part(self.part_path(batch, index), batch, index, columns)

    def message_ids(self, batch: int, *, except_part: int | None = None) -> set[str]:
        """The message ids journaled in ``batch`` (emitted or ack-only rows)."""
        ids: set[str] = set()
        for index in self.part_indexes(batch):
            if index != except_part:
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
                    part = self.read_part(batch, index, ["message_id"])
                    ids.update(part.table.column("message_id").to_pylist())
        return ids


def emitted_rows(part: Part) -> pa.Table:
    """What Spark gets from a part: its emitted rows, in the DataFrame's columns."""
    return part.table.slice(0, part.emitted).select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
