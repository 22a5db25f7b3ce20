"""``SqliteStore``'s snapshot tables: snapshots and the messages each retains.

A snapshot retains its subscription's whole backlog when it is taken (copied row by row
from the backlog table, window and cold rows alike) and, through its *position* (the last
seq its topic had published), every message the topic publishes after it: the topic
log, read from ``messages`` while a snapshot pins it.
"""

from __future__ import annotations

from eoclient.server_stub.core.store import SeqMessage, SnapshotRecord
from eoclient.server_stub.storage import codec
from eoclient.server_stub.storage.sqlite_rows import MESSAGE_COLUMNS, message_from_row
from eoclient.server_stub.storage.sqlite_writes import Names, Writes

_PUT_SNAPSHOT = (
    "INSERT INTO snapshots (id, topic, expire_time, labels, position) VALUES (?, ?, ?, ?, ?)"
)
_SNAPSHOT_BACKLOG = (
    "INSERT INTO snapshot_messages (snapshot, seq) SELECT ?, seq FROM backlog "
    "WHERE subscription = ?"
)
_UPDATE_SNAPSHOT = "UPDATE snapshots SET expire_time = ?, labels = ? WHERE id = ?"
_DELETE_SNAPSHOT_MESSAGES = "DELETE FROM snapshot_messages WHERE snapshot = ?"
_DELETE_SNAPSHOT = "DELETE FROM snapshots WHERE id = ?"


class SnapshotTables:
    def __init__(self, writes: Writes, names: Names) -> None:
        self._writes = writes
        self._names = names
        self.pins: dict[int, tuple[int, int]] = {}  # snapshot id -> (topic id, position)

    def records(self) -> list[SnapshotRecord]:
        """Every snapshot (at open)."""
        names = self._names.names()
        records = []
        for id_, topic, expire_time, labels, position in self._writes.db.execute(
            "SELECT id, topic, expire_time, labels, position FROM snapshots ORDER BY id"
        ):
            self.pins[id_] = (topic, position)
            labels = codec.attributes_from_json(labels)
            records.append(SnapshotRecord(names[id_], names[topic], expire_time, labels, position))
        return records

    def put(self, record: SnapshotRecord, subscription: int) -> None:
        id_ = self._names.id("snapshot", record.name)
        topic = self._names.id("topic", record.topic)
        self.pins[id_] = (topic, record.position)
        labels = codec.attributes_to_json(record.labels) or "{}"
        self._writes.write(_PUT_SNAPSHOT, (id_, topic, record.expire_time, labels, record.position))
        # The whole backlog, window and cold rows alike, is in the backlog table.
        self._writes.write(_SNAPSHOT_BACKLOG, (id_, subscription))

    def update(self, record: SnapshotRecord) -> None:
        labels = codec.attributes_to_json(record.labels) or "{}"
        id_ = self._names.id("snapshot", record.name)
        self._writes.write(_UPDATE_SNAPSHOT, (record.expire_time, labels, id_))

    def delete(self, name: str) -> None:
        id_ = self._names.id("snapshot", name)
        self.pins.pop(id_, None)
        self._writes.write(_DELETE_SNAPSHOT_MESSAGES, (id_,))
        self._writes.write(_DELETE_SNAPSHOT, (id_,))

    def messages(self, name: str) -> list[SeqMessage]:
        rows = self._writes.read(
            f"SELECT s.seq, {MESSAGE_COLUMNS} FROM snapshot_messages s "
            "JOIN messages m ON m.seq = s.seq WHERE s.snapshot = ? ORDER BY s.seq",
            (self._names.id("snapshot", name),),
        )
        return [(row[0], message_from_row(row[1:])) for row in rows]

    def topic_log(self, topic: str, after_seq: int) -> list[SeqMessage]:
        rows = self._writes.read(
            f"SELECT m.seq, {MESSAGE_COLUMNS} FROM messages m "
            "WHERE m.seq > ? AND m.topic = ? ORDER BY m.seq",
            (after_seq, self._names.id("topic", topic)),
        )
        return [(row[0], message_from_row(row[1:])) for row in rows]

    def floor(self, snapshot: int, position: int) -> int:
        """The smallest seq the snapshot still names: its retained messages and the topic
        log after its position."""
        (low,) = self._writes.db.execute(
            "SELECT MIN(seq) FROM snapshot_messages WHERE snapshot = ?", (snapshot,)
        ).fetchone()
        return position + 1 if low is None else min(position + 1, low)
