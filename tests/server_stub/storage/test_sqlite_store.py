"""SqliteStore: what a restart keeps and forgets, what is never committed, garbage
collection, and data directories that are not ours (every core scenario also runs on
SQLite with a restart check: see tests/server_stub/core/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from eoclient._clock import FakeClock
from eoclient.server_stub.core import (
    Broker,
    DeadLetterPolicy,
    ExpirationPolicy,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.storage.sqlite import DATABASE_FILE, SqliteStore, StoreError

from ..core.support import DLT, INVALID, SUB, TOPIC

SNAP = "projects/p1/snapshots/snap-a"
DAY = 86_400.0


class Server:
    """A broker on a data directory that can be restarted (or crash) like a process."""

    def __init__(self, directory: Path, window: int = 3) -> None:
        self.directory = directory
        self.window = window
        self.clock = FakeClock()
        self.store = SqliteStore(directory, window=window, gc_interval=0)
        self.broker = Broker(self.clock, store=self.store)

    def restart(self, *, commit: bool = True) -> None:
        """``commit=False``: the process dies with its last changes uncommitted."""
        if commit:
            self.store.close()
        else:
            self.store._writes.db.close()  # the open transaction is rolled back, as after a kill
            os.close(self.store._lock_fd)
            self.store._lock_fd = -1
        self.store = SqliteStore(self.directory, window=self.window, gc_interval=0)
        self.broker = Broker(self.clock, store=self.store)

    def publish(self, *datas: str, key: str = "") -> list[str]:
        return self.broker.publishing.publish(
            TOPIC, [NewMessage(d.encode(), ordering_key=key) for d in datas]
        )

    def data(self, sub: str = SUB, n: int = 100) -> list[str]:
        return [d.message.data.decode() for d in self.broker.leasing.pull(sub, n)]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "data")
    s.broker.topics.create(TopicConfig(TOPIC))
    yield s
    s.store.close()


def test_acks_messages_and_leases_survive(server: Server) -> None:
    server.broker.subscriptions.create(
        SubscriptionConfig(SUB, TOPIC, enable_exactly_once_delivery=True, ack_deadline_seconds=60)
    )
    server.publish(*"abcdef")
    deliveries = server.broker.leasing.pull(SUB, 4)
    assert server.broker.acks.acknowledge(SUB, [deliveries[0].ack_id, deliveries[1].ack_id]).ok
    server.restart()
    # Acked: gone for good. Leased (c, d): still leased, under the ack ids issued before.
    again = server.broker.leasing.pull(SUB, 10)
    assert [d.message.data for d in again] == [b"e", b"f"]
    assert server.broker.acks.acknowledge(SUB, [deliveries[2].ack_id, again[0].ack_id]).ok
    server.clock.advance(60)  # d's lease ran out: its id is invalid, d comes again
    reply = server.broker.acks.acknowledge(SUB, [deliveries[3].ack_id])
    assert reply.failures == {deliveries[3].ack_id: INVALID}
    assert server.data() == ["d", "f"]  # f's lease ran out too
    assert server.publish("g") == ["7"]  # message ids continue, never reused


def test_uncommitted_changes_are_gone_after_a_crash(server: Server) -> None:
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    server.publish("kept")
    server.store.commit()
    server.publish("lost")
    [first, _] = server.broker.leasing.pull(SUB, 2)
    server.broker.acks.acknowledge(SUB, [first.ack_id])  # never committed: as if never answered
    server.restart(commit=False)
    assert server.data() == ["kept"]


def test_delivery_attempts_and_dead_letters_survive(server: Server) -> None:
    server.broker.topics.create(TopicConfig(DLT))
    server.broker.subscriptions.create(
        SubscriptionConfig(SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    )
    server.publish("poison")
    for _ in range(3):
        [delivery] = server.broker.leasing.pull(SUB, 1)
        server.broker.acks.modify_ack_deadline(SUB, [delivery.ack_id], 0)
    server.restart()
    [delivery] = server.broker.leasing.pull(SUB, 1)
    assert delivery.delivery_attempt == 4


def test_retained_messages_snapshots_and_seek_survive(server: Server) -> None:
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC, retain_acked_messages=True))
    server.publish("a", "b")
    for delivery in server.broker.leasing.pull(SUB, 10):
        server.broker.acks.acknowledge(SUB, [delivery.ack_id])
    server.broker.snapshots.create(SNAP, SUB)  # empty backlog; the topic log pins c
    server.publish("c")
    server.restart()
    assert [m.data for m in server.broker.retained_acked(SUB)] == [b"a", b"b"]
    server.broker.snapshots.seek(SUB, time=0)
    assert server.data() == ["a", "b", "c"]
    server.restart()
    assert server.data() == []  # leased before the restart, and still
    server.clock.advance(10)  # the leases run out
    assert server.data() == ["a", "b", "c"]  # the seek's state was stored
    server.broker.snapshots.seek(SUB, snapshot=SNAP)
    server.restart()
    assert server.data() == ["c"]


def test_detached_and_expiring_subscriptions_keep_their_state(server: Server) -> None:
    other = "projects/p1/subscriptions/sub-b"
    server.broker.subscriptions.create(
        SubscriptionConfig(
            SUB, TOPIC, message_retention_duration=DAY, expiration_policy=ExpirationPolicy(2 * DAY)
        )
    )
    server.broker.subscriptions.create(SubscriptionConfig(other, TOPIC))
    server.broker.subscriptions.detach(other)
    server.clock.advance(DAY)
    server.broker.leasing.pull(SUB, 1)  # activity: the expiry clock restarts here
    server.restart()
    assert server.broker.subscriptions.get(other).config.detached
    server.clock.advance(2 * DAY - 1)
    server.broker.tick()
    assert server.broker.subscriptions.exists(SUB)
    server.clock.advance(1)
    server.broker.tick()
    assert not server.broker.subscriptions.exists(SUB)


def test_ordered_keys_resume_in_order_from_the_store(server: Server) -> None:
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC, enable_message_ordering=True))
    for i in range(10):
        server.publish(f"k{i}", key="k")
        server.publish(f"j{i}", key="j")
    server.restart()
    seen: list[str] = []
    while deliveries := server.broker.leasing.pull(SUB, 100):
        seen += [d.message.data.decode() for d in deliveries]
        server.broker.acks.acknowledge(SUB, [d.ack_id for d in deliveries])
    assert [s for s in seen if s[0] == "k"] == [f"k{i}" for i in range(10)]
    assert [s for s in seen if s[0] == "j"] == [f"j{i}" for i in range(10)]


def test_the_window_bounds_what_the_broker_holds(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", window=100)
    server.broker.topics.create(TopicConfig(TOPIC))
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    for _ in range(5):
        server.broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 1_000)
    delivery = server.broker.delivery_state(SUB)
    assert delivery.reads.backlog() == 5_000
    assert len(delivery.reads.held()) == 100
    for _ in range(10):
        pulled = server.broker.leasing.pull(SUB, 50)
        server.broker.acks.acknowledge(SUB, [d.ack_id for d in pulled])
        assert len(delivery.reads.held()) <= 2 * 100 + 50
    assert delivery.reads.backlog() == 4_500
    server.store.close()


def test_garbage_collection_keeps_what_something_refers_to(server: Server) -> None:
    other = "projects/p1/subscriptions/sub-b"
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    server.broker.subscriptions.create(SubscriptionConfig(other, TOPIC))
    server.publish("a", "b")
    for delivery in server.broker.leasing.pull(SUB, 10):
        server.broker.acks.acknowledge(SUB, [delivery.ack_id])
    server.broker.tick()
    assert server.store.statistics()["messages"] == 2  # sub-b still has them
    for delivery in server.broker.leasing.pull(other, 10):
        server.broker.acks.acknowledge(other, [delivery.ack_id])
    server.broker.snapshots.create(SNAP, SUB)
    server.publish("c")  # pinned by the snapshot's topic log, then delivered and acked
    for sub in (SUB, other):
        for delivery in server.broker.leasing.pull(sub, 10):
            server.broker.acks.acknowledge(sub, [delivery.ack_id])
    server.broker.tick()
    assert server.store.statistics()["messages"] == 1
    assert [m.data for _, m in server.store.snapshots.topic_log(TOPIC, 0)] == [b"c"]
    server.broker.snapshots.delete(SNAP)
    server.broker.tick()
    assert server.store.statistics()["messages"] == 0


# ----------------------------------------------------------- data directories


def test_a_directory_of_other_files_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(StoreError, match=r"notes\.txt"):
        SqliteStore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_database_file_that_is_not_sqlite_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / DATABASE_FILE
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(StoreError, match=f"{DATABASE_FILE} is not an SQLite database"):
        SqliteStore(tmp_path)
    assert path.read_bytes() == b"not a database at all" * 100


def test_someone_elses_sqlite_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / DATABASE_FILE
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE accounts (id INTEGER)")
    before = path.read_bytes()
    with pytest.raises(StoreError, match="not an eoclient store"):
        SqliteStore(tmp_path)
    assert path.read_bytes() == before


def test_a_corrupt_store_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    broker = Broker(FakeClock(), store=store)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    for _ in range(2):
        broker.publishing.publish(TOPIC, [NewMessage(os.urandom(200)) for _ in range(1_000)])
    store.close()
    path = tmp_path / DATABASE_FILE
    data = bytearray(path.read_bytes())
    page = 4096
    for offset in range(3 * page, len(data) - page, 2 * page):  # garble every other page
        data[offset : offset + 512] = b"\xff" * 512
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match=f"{DATABASE_FILE} is corrupt"):
        SqliteStore(tmp_path)


def test_a_second_server_on_the_directory_is_refused(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path)
    try:
        with pytest.raises(StoreError, match=f"pid {os.getpid()} holds"):
            SqliteStore(tmp_path)
    finally:
        first.close()
    SqliteStore(tmp_path).close()  # free again once the first is closed


def test_documents_survive_a_restart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    store.resources.put_document("schema", "projects/p1/schemas/s1", b"avro")
    store.resources.put_document("schema", "projects/p1/schemas/s2", b"proto")
    store.resources.put_document("iam", "projects/p1/topics/t", b"{}")
    store.resources.delete_document("schema", "projects/p1/schemas/s2")
    store.close()
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened.load().documents == {
            ("schema", "projects/p1/schemas/s1"): b"avro",
            ("iam", "projects/p1/topics/t"): b"{}",
        }
    finally:
        reopened.close()


def test_an_unpulled_retention_cursor_still_expires_its_cold_rows_after_a_restart(
    server: Server,
) -> None:
    """After a restart the topic's retention cursor (never pulled) holds only cold rows;
    its oldest row must still schedule the retention, or expired messages — and the
    topic's garbage behind them — would stay on disk for ever."""
    hour = 3600.0
    server.broker.topics.update(
        TopicConfig(TOPIC, message_retention_duration=hour), ["message_retention_duration"]
    )
    server.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    server.publish(*"abcde")
    assert server.broker.acks.acknowledge(
        SUB, [d.ack_id for d in server.broker.leasing.pull(SUB, 10)]
    ).ok
    server.restart()
    for _ in range(3):
        server.clock.advance(hour)
        server.publish("later")
        assert server.broker.acks.acknowledge(
            SUB, [d.ack_id for d in server.broker.leasing.pull(SUB, 10)]
        ).ok
        server.broker.tick()
        server.store.commit()
    assert server.broker.topics.policy_counters(TOPIC).retained_messages == 1
    assert server.store.statistics()["messages"] == 1
