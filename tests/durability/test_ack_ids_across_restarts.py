"""Ack ids across a restart of a durable broker (SqliteStore, fake clock): what an ack
id issued before a crash means after it.

A "crash" here closes the database without committing, as a killed process leaves it:
what the last commit held survives, the rest is rolled back at the next open.
"""

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
    Delivery,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.delivery.leases import Leases
from eoclient.server_stub.storage.sqlite import DATABASE_FILE, SqliteStore

TOPIC = "projects/p1/topics/work"
DLT = "projects/p1/topics/dead"
SUB = "projects/p1/subscriptions/work"
INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"


class Server:
    """A broker on a data directory, restarted as after a kill -9."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clock = FakeClock()
        self._open()

    def _open(self) -> None:
        self.store = SqliteStore(self.directory, window=3, gc_interval=0)
        self.broker = Broker(self.clock, store=self.store)

    def crash(self) -> None:
        """Lose everything not committed, then start again on the directory."""
        self.store._writes.db.close()  # the open transaction is rolled back
        os.close(self.store._lock_fd)
        self.store._lock_fd = -1
        self._open()

    def commit(self) -> None:
        self.store.commit()

    def publish(self, *datas: str, key: str = "") -> None:
        self.broker.publishing.publish(
            TOPIC, [NewMessage(d.encode(), ordering_key=key) for d in datas]
        )

    def pull(self, n: int = 100) -> list[Delivery]:
        return self.broker.leasing.pull(SUB, n)

    def ack(self, *deliveries: Delivery) -> dict[str, str]:
        return dict(self.broker.acks.acknowledge(SUB, [d.ack_id for d in deliveries]).failures)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path / "data")
    s.broker.topics.create(TopicConfig(TOPIC))
    s.broker.subscriptions.create(
        SubscriptionConfig(SUB, TOPIC, enable_exactly_once_delivery=True, ack_deadline_seconds=60)
    )
    yield s
    s.store.close()


def data(deliveries: list[Delivery]) -> list[str]:
    return [d.message.data.decode() for d in deliveries]


def test_a_live_lease_from_before_the_crash_settles_its_message(server: Server) -> None:
    server.publish("a", "b")
    a, b = server.pull()
    server.commit()  # the leases reach the disk (the shell waits for it before sending)
    server.clock.advance(30)
    server.crash()
    assert server.pull() == []  # still leased: nothing to deliver
    assert server.ack(a, b) == {}
    server.clock.advance(3600)
    assert server.pull() == []
    assert server.broker.backlog(SUB) == 0


def test_an_ack_committed_before_the_crash_answers_success_when_retried(server: Server) -> None:
    server.publish("a", "b")
    a, b = server.pull()
    assert server.ack(a) == {}
    server.commit()  # the ack is stored; its answer is lost with the process
    server.crash()
    assert server.ack(a) == {}  # the retry: SUCCESS again
    assert server.ack(a, b) == {}
    assert server.broker.acks.modify_ack_deadline(SUB, [a.ack_id], 30).ok  # changes nothing
    server.clock.advance(3600)
    assert server.pull() == []  # neither is ever delivered again
    # Past the lease's deadline the id is as any expired one: invalid.
    assert server.ack(a) == {a.ack_id: INVALID}


def test_an_ack_lost_with_the_crash_is_applied_by_its_retry(server: Server) -> None:
    server.publish("a")
    [a] = server.pull()
    server.commit()
    assert server.ack(a) == {}  # answered... but never committed: the shell never sent it
    server.crash()
    assert server.ack(a) == {}
    assert server.broker.backlog(SUB) == 0


def test_an_expired_lease_from_before_the_crash_is_invalid(server: Server) -> None:
    server.publish("a")
    [a] = server.pull()
    server.commit()
    server.crash()
    server.clock.advance(60)
    assert server.ack(a) == {a.ack_id: INVALID}
    [again] = server.pull()
    assert again.ack_id != a.ack_id
    assert server.ack(again) == {}


def test_only_the_latest_delivery_from_before_the_crash_resolves(server: Server) -> None:
    server.publish("a")
    [first] = server.pull()
    assert server.broker.acks.modify_ack_deadline(SUB, [first.ack_id], 0).ok  # nack
    [second] = server.pull()
    server.commit()
    server.crash()
    assert server.ack(first) == {first.ack_id: INVALID}
    assert server.ack(second) == {}


def test_extensions_survive_and_a_lease_ended_before_the_crash_stays_ended(
    server: Server,
) -> None:
    server.publish("a", "b")
    a, b = server.pull()
    assert server.broker.acks.modify_ack_deadline(SUB, [a.ack_id], 600).ok
    assert server.broker.acks.modify_ack_deadline(SUB, [b.ack_id], 0).ok
    server.commit()
    server.crash()
    server.clock.advance(300)  # a's first deadline (60 s) is long past, its extension not
    assert server.ack(a) == {}
    assert server.ack(b) == {b.ack_id: INVALID}
    [again] = server.pull()
    assert data([again]) == ["b"]
    assert again.ack_id != b.ack_id  # a new generation, never one issued before


def test_stored_leases_are_forgotten_after_their_deadlines(server: Server) -> None:
    start = server.clock.now()
    server.publish(*"abc")
    assert server.ack(*server.pull()) == {}
    server.clock.advance(30)
    server.publish(*"de")
    assert server.ack(*server.pull()) == {}  # leased until 30 s after the first ones
    server.commit()
    assert server.store.statistics()["leases"] == 2  # two Pulls' batches
    # Nobody pulls or acks any more: the broker's ticks alone, at its own wake-up times.
    while server.store.statistics()["leases"]:
        wakeup = server.broker.next_wakeup()
        assert wakeup is not None, "stored leases left with nothing scheduled to forget them"
        assert wakeup <= server.clock.now() + Leases.FORGET_LEASES_INTERVAL
        server.clock.advance(max(wakeup - server.clock.now(), 0.0))
        server.broker.tick()
        server.commit()
    assert server.clock.now() - start >= 90  # not before the last lease's deadline
    assert server.broker.delivery_state(SUB).next_wakeup() is None  # and then no more


def test_a_seek_after_the_restart_ends_every_earlier_id(server: Server) -> None:
    server.publish("a", "b")
    a, b = server.pull()
    assert server.ack(a) == {}
    server.commit()
    server.crash()
    server.broker.snapshots.seek(SUB, time=0)
    assert server.ack(a, b) == {a.ack_id: INVALID, b.ack_id: INVALID}
    server.commit()
    server.crash()
    assert data(server.pull()) == ["b"]  # a was acked and is not retained: gone
    assert server.ack(a, b) == {a.ack_id: INVALID, b.ack_id: INVALID}


def test_ordering_keys_keep_their_leases_and_their_order(tmp_path: Path) -> None:
    server = Server(tmp_path / "data")
    server.broker.topics.create(TopicConfig(TOPIC))
    server.broker.subscriptions.create(
        SubscriptionConfig(
            SUB,
            TOPIC,
            enable_exactly_once_delivery=True,
            enable_message_ordering=True,
            ack_deadline_seconds=60,
        )
    )
    try:
        server.publish("k0", "k1", key="k")
        k0, k1 = server.pull()
        server.publish("k2", "k3", key="k")
        server.commit()
        server.crash()
        [k2, k3] = server.pull()  # the key's delivered prefix is k0, k1: k2 goes next
        assert data([k2, k3]) == ["k2", "k3"]
        # k1 acked before k0: out of order
        assert server.ack(k1) == {k1.ack_id: "TRANSIENT_FAILURE_UNORDERED_ACK_ID"}
        assert server.broker.acks.modify_ack_deadline(SUB, [k0.ack_id], 0).ok  # nack: all again
        assert server.ack(k1, k2, k3) == {
            k1.ack_id: INVALID,
            k2.ack_id: INVALID,
            k3.ack_id: INVALID,
        }
        again = server.pull()
        assert data(again) == ["k0", "k1", "k2", "k3"]
        for delivery in again:
            assert server.ack(delivery) == {}
    finally:
        server.store.close()


def test_a_lease_that_ran_out_while_the_server_was_down_counts_as_an_attempt(
    tmp_path: Path,
) -> None:
    server = Server(tmp_path / "data")
    server.broker.topics.create(TopicConfig(TOPIC))
    server.broker.topics.create(TopicConfig(DLT))
    server.broker.subscriptions.create(
        SubscriptionConfig(SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT, 5))
    )
    try:
        server.publish("a")
        [first] = server.pull()
        assert first.delivery_attempt == 1
        server.commit()
        server.crash()
        server.clock.advance(10)  # the subscription's default 10 s deadline, while down
        [second] = server.pull()
        assert second.delivery_attempt == 2
    finally:
        server.store.close()


# A store written by format 1 (before leases, uids and remembered acks were kept).
_FORMAT_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE names (id INTEGER PRIMARY KEY, kind TEXT NOT NULL, name TEXT NOT NULL,
                    UNIQUE (kind, name));
CREATE TABLE topics (id INTEGER PRIMARY KEY, config TEXT NOT NULL);
CREATE TABLE subscriptions (id INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                            config TEXT NOT NULL, created REAL NOT NULL,
                            last_activity REAL NOT NULL);
CREATE TABLE messages (seq INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                       message_id TEXT NOT NULL, data BLOB NOT NULL, attributes TEXT,
                       ordering_key TEXT NOT NULL, publish_time REAL NOT NULL,
                       size INTEGER NOT NULL);
CREATE TABLE backlog (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                      failed_attempts INTEGER NOT NULL DEFAULT 0, size INTEGER NOT NULL,
                      PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
CREATE TABLE retained (subscription INTEGER NOT NULL, seq INTEGER NOT NULL,
                       publish_time REAL NOT NULL,
                       PRIMARY KEY (subscription, seq)) WITHOUT ROWID;
CREATE TABLE snapshots (id INTEGER PRIMARY KEY, topic INTEGER NOT NULL,
                        expire_time REAL NOT NULL, labels TEXT NOT NULL,
                        position INTEGER NOT NULL);
CREATE TABLE snapshot_messages (snapshot INTEGER NOT NULL, seq INTEGER NOT NULL,
                                PRIMARY KEY (snapshot, seq)) WITHOUT ROWID;
CREATE TABLE documents (kind TEXT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL,
                        PRIMARY KEY (kind, name)) WITHOUT ROWID;
"""


def test_a_format_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    # Written by this version, then turned back into format 1 by hand: the same rows.
    store = SqliteStore(directory)
    broker = Broker(FakeClock(), store=store)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    broker.publishing.publish(TOPIC, [NewMessage(b"kept")])
    store.close()
    path = directory / DATABASE_FILE
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        rows = {
            table: db.execute(f"SELECT * FROM {table}").fetchall()
            for table in ("meta", "names", "topics", "messages")
        }
        subscriptions = db.execute(
            "SELECT id, topic, config, created, last_activity FROM subscriptions"
        ).fetchall()
        backlog = db.execute("SELECT subscription, seq, failed_attempts, size FROM backlog")
        backlog_rows = backlog.fetchall()
    path.unlink()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.executescript(_FORMAT_1)
        for table, values in rows.items():
            for row in values:
                db.execute(f"INSERT INTO {table} VALUES ({','.join('?' * len(row))})", row)
        db.execute("UPDATE meta SET value = 1 WHERE key = 'version'")
        db.executemany("INSERT INTO subscriptions VALUES (?, ?, ?, ?, ?)", subscriptions)
        db.executemany("INSERT INTO backlog VALUES (?, ?, ?, ?)", backlog_rows)
    store = SqliteStore(directory)
    try:
        broker = Broker(FakeClock(), store=store)
        [delivery] = broker.leasing.pull(SUB, 10)
        assert delivery.message.data == b"kept"
        assert broker.acks.acknowledge(SUB, [delivery.ack_id]).ok
    finally:
        store.close()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        assert db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone() == (2,)
