"""Which objects each import topic has ingested: remembered across restarts with --data-dir.

The choice: a small file of this room's own in the data directory
(``ingested-objects.jsonl``), not a table in the broker's SQLite store. Each line is one
fact, appended and flushed to disk when it becomes true — ``{"topic", "bucket", "object",
"generation"}`` once an object's messages are committed, ``{"forget": topic}`` when a
topic is deleted or created anew (a new topic of an old name starts from nothing). Facts
only accumulate and are never updated, which is what an append-only file does well; the
store's schema, which other rooms share and which has versions of its own, stays as it
is; and the broker, which knows nothing of ingestion, is not asked to keep what it cannot
explain. A line cut short by a crash is ignored on reading (its object is ingested once
more, see below). Without a data directory the ledger is memory only, like everything
else.

When the record is written: after the object's messages are durable (the Publish calls
returned, ``group_commit``), before the next object. A crash between the two ingests that
one object again after the restart — duplicates, never a loss (at least once, like any
publisher that retries). A clean stop loses nothing and repeats nothing.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from eoclient.server_stub.ingestion.cloud_storage import ObjectKey

logger = logging.getLogger("eoclient.server_stub.ingestion")

FILE_NAME = "ingested-objects.jsonl"


class IngestedObjects:
    """The ingested objects of every topic, in memory, and in ``path`` when given."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._done: dict[str, set[ObjectKey]] = {}
        if path is not None and path.exists():
            self._load(path)

    @classmethod
    def in_directory(cls, data_dir: str | os.PathLike[str] | None) -> IngestedObjects:
        return cls(None if data_dir is None else Path(data_dir) / FILE_NAME)

    def _load(self, path: Path) -> None:
        with path.open("rb") as lines:
            for number, raw in enumerate(lines, 1):
                if not raw.endswith(b"\n"):
                    logger.warning("%s: line %d was cut short (a crash); ignored", path, number)
                    break
                fact = json.loads(raw)
                if "forget" in fact:
                    self._done.pop(fact["forget"], None)
                else:
                    key = (fact["bucket"], fact["object"], int(fact["generation"]))
                    self._done.setdefault(fact["topic"], set()).add(key)

    def _append(self, fact: dict[str, object]) -> None:
        if self._path is None:
            return
        line = json.dumps(fact, separators=(",", ":")).encode() + b"\n"
        with self._path.open("ab") as out:
            out.write(line)
            out.flush()
            os.fsync(out.fileno())

    def of(self, topic: str) -> set[ObjectKey]:
        """The objects ``topic`` ingested (a live view: it grows as ``add`` is called)."""
        return self._done.setdefault(topic, set())

    def add(self, topic: str, key: ObjectKey) -> None:
        bucket, name, generation = key
        self._append({"topic": topic, "bucket": bucket, "object": name, "generation": generation})
        self.of(topic).add(key)

    def forget(self, topic: str) -> None:
        if self._done.pop(topic, None):
            self._append({"forget": topic})

    def topics(self) -> list[str]:
        return list(self._done)
