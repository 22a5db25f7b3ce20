"""The source's journal: per batch, the plan and one Arrow file per part, written atomically.

Layout (``journalPath``; it belongs to one checkpoint)::

    epoch.json                    the journal's id, in every offset (ties it to a checkpoint)
    state.json                    {"settled": S}: batches < S are acked and pruned
    driver-<run>.log              the driver's lease log (``_lease_log``), per run
    readahead/<id>.log            a worker's read-ahead lease log (``_ahead``), until a
                                  read task adopts it (renamed to its attempt log) or it
                                  is given back (renamed to ``<id>.<owner>.giveback``)
    pending/<batch>-<part>.arrow  message ids committed whose ack was not confirmed when
                                  that part was settled: a redelivery is acked, not
                                  emitted (kept ``PENDING_TTL_SECONDS`` by mtime)
    batch-<k>/plan.json           {"quotas": [...], "probe", "settles", "cutoff_ns",
                                  "ack_deadline"}: written before latestOffset returns k + 1
    batch-<k>/part-00000.arrow    the driver's probe pull
    batch-<k>/part-<i>.arrow      read task i's pull (i >= 1)
    batch-<k>/part-<i>.<attempt>.log   a read task attempt's lease log, until it journals
    batch-<k>/part-<i>.settled    the part's acks are done (written by whoever settled
                                  it, after its pending file)
    batch-<k>/part-<i>.settling   locked (``flock``) while a process settles the part
    batch-<k>/committed           Spark has committed the batch (the driver, when
                                  ``latestOffset(k + 1)`` is called): a worker that emitted
                                  one of its parts may settle it then (``_settle``)

A part file holds ``WIRE_SCHEMA`` rows: first the ``emitted`` rows Spark gets (schema
metadata ``emitted``), then ack-only rows: redeliveries of messages another part of the
batch holds, whose ack ids are acked with the batch. Its metadata ``leased_until`` is when
the leases of its deliveries end (the puller's wall clock), for the lease keepers.

Every file is written to a temporary name, fsync'd, and then put in place atomically: the
plan and state with ``rename`` (a rewrite replaces them), a part with ``link``, which fails
if the name exists: two attempts racing for one part (a retry and a straggler, a
speculative copy) cannot both win; the loser gives its messages back and replays the
winner's file. The journal must be a POSIX file system path that the driver and every
executor see at the same path (local disk for ``local[*]``; a shared mount such as NFS on a
cluster): Python read tasks cannot reach Spark's Hadoop file systems (``hdfs://``,
``s3a://``), which ``_options`` refuses with a clear error.

A part's message ids come back with their publish times, a pending file's alone
(``_dated_ids``: what a read task checks its pull against).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.ipc

from eoclient.spark._dated_ids import DatedIds
from eoclient.spark._schema import ROW_SCHEMA, WIRE_SCHEMA

EPOCH_FILE = "epoch.json"
STATE_FILE = "state.json"
PLAN_FILE = "plan.json"
PENDING_DIR = "pending"
READ_AHEAD_DIR = "readahead"
_BATCH = re.compile(r"^batch-(\d{20})$")
_PART = re.compile(r"^part-(\d{5})\.arrow$")
_ATTEMPT_LOG = re.compile(r"^part-(\d{5})\.[0-9a-f]+\.log$")
_PENDING = re.compile(r"^\d+-\d+\.arrow$")
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


def _write_temporary(directory: Path, name: str, data: bytes | PartFile) -> Path:
    tmp = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    # Unbuffered: an Arrow writer hands its buffers straight to the file (no copy in a
    # Python buffer), and bytes are one write.
    with tmp.open("wb", buffering=0) as out:
        if isinstance(data, PartFile):
            data.write(out)
        else:
            out.write(data)
        os.fsync(out.fileno())
    return tmp


def atomic_replace(path: Path, data: bytes) -> None:
    tmp = _write_temporary(path.parent, path.name, data)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def atomic_create(path: Path, data: bytes | PartFile) -> bool:
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
    """How batch ``k`` is read: the probe part (0) if ``probe``, then ``len(quotas)`` read
    tasks; and which committed batches its tasks settle (ack) first.

    Attributes:
        quotas: how many messages each read task pulls at most.
        probe: whether part 0 (the driver's probe) holds rows. A batch with neither probe
            nor quotas only settles: its tasks ack ``settles`` and return no row.
        settles: committed batches whose parts this batch's tasks ack (and whose dead
            attempts' deliveries they give back) before they pull.
        cutoff_ns: ``availableNow``: publish time after which a message waits for a later
            run; ``None`` otherwise.
        ack_deadline: the subscription's, in seconds.
    """

    quotas: tuple[int, ...]
    probe: bool
    settles: tuple[int, ...]
    cutoff_ns: int | None
    ack_deadline: float

    @property
    def reads(self) -> bool:
        """Whether the batch has rows to emit (and so a later batch must settle it)."""
        return self.probe or bool(self.quotas)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "quotas": list(self.quotas),
                "probe": self.probe,
                "settles": list(self.settles),
                "cutoff_ns": self.cutoff_ns,
                "ack_deadline": self.ack_deadline,
            }
        ).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Plan:
        raw = json.loads(data)
        return cls(
            tuple(raw["quotas"]),
            # A plan without these was written by the version whose driver acked every
            # batch itself: it always had a probe part, and its tasks settled nothing.
            bool(raw.get("probe", True)),
            tuple(raw.get("settles", ())),
            raw["cutoff_ns"],
            float(raw["ack_deadline"]),
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


@dataclass(frozen=True, slots=True)
class PartFile:
    """A part file to write: ``rows`` (emitted) then ``ack_only`` rows (WIRE_SCHEMA).
    :meth:`Journal.claim` writes it straight into its temporary file: built in memory and
    then copied to ``bytes`` (as :func:`encode_part` does), a 100,000-message part cost a
    read task ~8 % of its time in the copy alone (py-spy inside Spark)."""

    rows: pa.Table
    ack_only: pa.Table
    leased_until: float

    def write(self, out: pa.NativeFile | BinaryIO) -> None:
        schema = WIRE_SCHEMA.with_metadata(
            {"emitted": str(self.rows.num_rows), "leased_until": repr(self.leased_until)}
        )
        with pyarrow.ipc.new_file(out, schema) as writer:
            for table in (self.rows, self.ack_only):
                if table.num_rows:
                    writer.write_table(table.cast(WIRE_SCHEMA))


def encode_part(rows: pa.Table, ack_only: pa.Table, leased_until: float) -> bytes:
    """A part file's bytes, the same :meth:`PartFile.write` puts in a file."""
    sink = pa.BufferOutputStream()
    PartFile(rows, ack_only, leased_until).write(sink)
    return bytes(sink.getvalue())


def _read_ipc(path: Path) -> pa.Table:
    with pa.memory_map(str(path)) as source:
        return pyarrow.ipc.open_file(source).read_all()


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
            return {"settled": 0}
        state: dict[str, Any] = json.loads(path.read_text())
        return state

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_replace(self.directory / STATE_FILE, json.dumps(state, sort_keys=True).encode())

    # ------------------------------------------------------------------ pending

    def pending_dir(self) -> Path:
        return self.directory / PENDING_DIR

    def write_pending(self, batch: int, index: int, message_ids: list[str]) -> None:
        """Committed messages of part ``index`` of ``batch`` whose ack was not confirmed."""
        directory = self.pending_dir()
        directory.mkdir(exist_ok=True)
        table = pa.table({"message_id": pa.array(message_ids, pa.string())})
        sink = pa.BufferOutputStream()
        with pyarrow.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table)
        atomic_replace(directory / f"{batch}-{index}.arrow", bytes(sink.getvalue()))

    def pending_files(self) -> list[Path]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(p for p in self.pending_dir().iterdir() if _PENDING.match(p.name))
        return []

    def pending_ids(self) -> list[DatedIds]:
        """The pending message ids (one entry per file; a pending file keeps no times)."""
        columns = []
        for path in self.pending_files():
            with contextlib.suppress(FileNotFoundError):  # expired meanwhile
                columns.append(DatedIds(_read_ipc(path).column("message_id").combine_chunks()))
        return columns

    def expire_pending(self, older_than: float) -> None:
        """Forget pending files last written before ``older_than`` (wall clock)."""
        for path in self.pending_files():
            with contextlib.suppress(FileNotFoundError):
                if path.stat().st_mtime < older_than:
                    path.unlink()

    def driver_logs(self) -> list[Path]:
        return sorted(p for p in self.directory.iterdir() if _DRIVER_LOG.match(p.name))

    def new_driver_log(self) -> Path:
        return self.directory / f"driver-{uuid.uuid4().hex}.log"

    # ----------------------------------------------------------------- read-ahead

    def new_read_ahead_log(self) -> Path:
        directory = self.directory / READ_AHEAD_DIR
        directory.mkdir(exist_ok=True)
        return directory / f"{uuid.uuid4().hex}.log"

    def read_ahead_logs(self) -> list[Path]:
        """Read-ahead logs, held (``.log``) or being given back (``.giveback``)."""
        with contextlib.suppress(FileNotFoundError):
            return sorted(
                p
                for p in (self.directory / READ_AHEAD_DIR).iterdir()
                if p.suffix in (".log", ".giveback")
            )
        return []

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

    def attempt_logs(self, batch: int, index: int | None = None) -> list[Path]:
        """The lease logs of read task attempts of ``batch`` (of its part ``index``)."""
        with contextlib.suppress(FileNotFoundError):
            return sorted(
                p
                for p in self.batch_dir(batch).iterdir()
                if (match := _ATTEMPT_LOG.match(p.name))
                and (index is None or int(match[1]) == index)
            )
        return []

    def settled_path(self, batch: int, index: int) -> Path:
        return self.batch_dir(batch) / f"part-{index:05d}.settled"

    def mark_settled(self, batch: int, index: int) -> None:
        """The part's acks are done. Not fsync'd: after a machine crash without it the part
        is settled again, which sends its acks again (their ids then fail: pending)."""
        with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
            self.settled_path(batch, index).touch()

    def committed_path(self, batch: int) -> Path:
        return self.batch_dir(batch) / "committed"

    def mark_committed(self, batch: int) -> None:
        """Spark has committed ``batch``. Not fsync'd: without it, the tasks the driver
        deals the batch's parts to settle them, as they would anyway."""
        with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
            self.committed_path(batch).touch()

    @contextlib.contextmanager
    def settle_lock(self, batch: int, index: int, *, wait: bool) -> Iterator[bool]:
        """Whether this process holds the lock of settling part ``index`` of ``batch``
        (``wait``: until it does; else only if no other holds it now; ``False`` also for
        a batch pruned meanwhile). Two settles of one part at once would each ack its ids,
        the second's failing (pending: harmless, but a file every batch reads); the lock,
        released when its holder dies, keeps them apart. Where ``flock`` is not exclusive
        (some network file systems) they may overlap, which costs only that."""
        try:
            fd = os.open(
                self.batch_dir(batch) / f"part-{index:05d}.settling", os.O_CREAT | os.O_RDWR
            )
        except FileNotFoundError:
            yield False
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # (the lock with it)

    def parts_journaled(self, batch: int, pulling_tasks: int) -> bool:
        """Whether the parts of ``batch``'s ``pulling_tasks`` read tasks (1, 2, ...) are all
        journaled: none of them pulls any more."""
        return all(self.part_path(batch, index).exists() for index in range(1, pulling_tasks + 1))

    def part_indexes(self, batch: int) -> list[int]:
        with contextlib.suppress(FileNotFoundError):
            return sorted(
                int(match[1])
                for p in self.batch_dir(batch).iterdir()
                if (match := _PART.match(p.name))
            )
        return []

    def claim(self, batch: int, index: int, data: bytes | PartFile) -> bool:
        """Journal a part unless another attempt did; whether this one did."""
        return atomic_create(self.part_path(batch, index), data)

    def read_part(self, batch: int, index: int, columns: list[str] | None = None) -> Part:
        return _read_part(self.part_path(batch, index), batch, index, columns)

    def message_ids(self, batch: int, *, except_part: int | None = None) -> list[DatedIds]:
        """The message ids journaled in ``batch`` (emitted or ack-only rows), with their
        publish times (null in ack-only rows), one entry per part (a part pruned meanwhile
        has none)."""
        columns = []
        for index in self.part_indexes(batch):
            if index != except_part:
                with contextlib.suppress(FileNotFoundError):  # pruned meanwhile
                    table = self.read_part(batch, index, ["message_id", "publish_time"]).table
                    columns.append(
                        DatedIds(
                            table.column("message_id").combine_chunks(),
                            table.column("publish_time").combine_chunks(),
                        )
                    )
        return columns


def emitted_rows(part: Part) -> pa.Table:
    """What Spark gets from a part: its emitted rows, in the DataFrame's columns."""
    return part.table.slice(0, part.emitted).select(ROW_SCHEMA.names).cast(ROW_SCHEMA)
