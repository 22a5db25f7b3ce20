"""The batch paths of the delivery engine against its one-message-at-a-time paths.

Acknowledge settles a request's ids at once (``Acks._apply_batch``: ``parse_ack_ids``,
``SubscriptionDelivery.ack_many``, ``LeaseTable.settle_many``); a ModifyAckDeadline that
extends moves their leases at once (``SubscriptionDelivery.extend_many``,
``LeaseTable.extend_many``), and one that nacks ends them and gives their messages back at
once (``SubscriptionDelivery.nack_many``, ``LeaseTable.end_many``, ``LeaseEnds.nacked_many``:
with the backoff, dead letters and retention drops of one by one); each leaves the rest —
stale, repeated, restored ids — to the per-id path. Pull and StreamingPull (under the
stream's flow control) take runs of ready messages at once (``Schedule.take_run``,
``SubscriptionDelivery._deliver_run``, ``Leases.lease_run``, ``LeaseTable.add_many``) and
the rest one at a time; the window's refill admits the rows it loads past every lease at
once (``Backlog.load_fresh``, ``Waiting._admit_fresh``; see also delivery/test_refill.py)
and looks at each row otherwise. On random scenarios (publishes, pulls with byte limits,
pulls of a stream under its flow control, acks, nacks and modacks of fresh, stale, repeated
and foreign ids, time passing; plain and exactly-once, with and without ordering keys, with
a retry backoff, dead letters or a retention, in memory and on SQLite with a small window)
a broker using the batch paths must answer and end up exactly as one whose batch paths are
switched off.
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoclient._clock import FakeClock
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import (
    Broker,
    DeadLetterPolicy,
    NewMessage,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.ack_ids import parse_ack_id, parse_ack_ids
from eoclient.server_stub.core.delivery.lease_table import LeaseTable, NewLeases
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/batch"
SUB = "projects/p1/subscriptions/batch"
DEAD_LETTERS = "projects/p1/topics/dead-letters"
DEAD_LETTERED = "projects/p1/subscriptions/dead-lettered"
# What a lease's end (a nack, an expiry) may lead to besides waiting again at once.
_POLICIES: dict[str, dict[str, Any]] = {
    "none": {},
    "backoff": {"retry_policy": RetryPolicy(1.0, 8.0)},
    "dead letters": {"dead_letter_policy": DeadLetterPolicy(DEAD_LETTERS, 5)},
    "retention": {"message_retention_duration": 600.0},
}

# ----------------------------------------------------------------- parse_ack_ids

_UID = "0a1b2c3d4e5f"
_id_piece = st.one_of(
    st.integers(0, 10**20).map(str),
    st.sampled_from(["", "01", "²", "1\n2", "-", "x", "12a", "9" * 19, "9" * 20]),
)
_ids = st.one_of(
    st.tuples(st.just(_UID), _id_piece, _id_piece).map("-".join),
    st.tuples(st.sampled_from(["ffffffffffff", "", _UID + "-1"]), _id_piece, _id_piece).map(
        "-".join
    ),
    st.text(max_size=30),
)


@given(st.lists(_ids, max_size=8), st.sampled_from([_UID, "a-b", "00", "a\nb"]))
def test_parse_ack_ids_answers_what_parse_ack_id_does(ack_ids: list[str], uid: str) -> None:
    parsed = parse_ack_ids(uid, ack_ids)
    one_by_one = [parse_ack_id(ack_id) for ack_id in ack_ids]
    all_issued = bool(ack_ids) and all(
        parts is not None and parts.uid == uid and "\n" not in ack_id
        for ack_id, parts in zip(ack_ids, one_by_one, strict=True)
    )
    if not all_issued or "-" in uid or "\n" in uid:
        assert parsed is None
        return
    assert parsed is not None
    seqs, generations = parsed
    assert [(uid, seq, generation) for seq, generation in zip(seqs, generations, strict=True)] == [
        tuple(parts) for parts in one_by_one if parts is not None
    ]


# ----------------------------------------------------------------- whole scenarios

# Which of the newest issued ids (by position, counted from the newest), and how.
_nack = st.tuples(
    st.just("nack"),
    st.lists(st.integers(0, 12), max_size=15),
    st.sampled_from(
        ["as is", "in order", "shuffled", "repeated", "with a foreign id", "never issued"]
    ),
)
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 12), st.sampled_from(["", "k1", "k2"])),
        # max_bytes: the default, or a few messages' worth (each is 2 or 3 bytes).
        st.tuples(st.just("pull"), st.integers(1, 10), st.sampled_from([None, 1, 7])),
        # On the run's StreamingPull stream, under its flow control.
        st.tuples(st.just("stream"), st.integers(1, 10)),
        # Which issued ids (by position, counted from the newest), and how.
        st.tuples(
            st.just("ack"),
            st.lists(st.integers(0, 40), max_size=15),
            st.sampled_from(["as is", "shuffled", "repeated", "with a foreign id", "never issued"]),
        ),
        _nack,
        st.tuples(
            st.just("modack"),
            st.lists(st.integers(0, 40), max_size=15),
            st.sampled_from(["as is", "shuffled", "repeated", "with a foreign id", "never issued"]),
        ),
        # 605 s: past the retention of the subscriptions that have one (600 s).
        st.tuples(st.just("wait"), st.sampled_from([1.0, 5.0, 11.0, 30.0, 605.0])),
    ),
    max_size=30,
)


class _Run:
    """One broker of the pair, on its own store."""

    def __init__(
        self,
        store: Store | None,
        options: dict[str, Any],
        *,
        batches: bool,
        flow: tuple[int, int] = (0, 0),
    ) -> None:
        self.clock = FakeClock()
        self.broker = Broker(self.clock, store=store, rng=random.Random(7), record_history=False)
        self.broker.topics.create(TopicConfig(TOPIC))
        self.broker.topics.create(TopicConfig(DEAD_LETTERS))
        self.broker.subscriptions.create(SubscriptionConfig(DEAD_LETTERED, DEAD_LETTERS))
        self.broker.subscriptions.create(
            SubscriptionConfig(SUB, TOPIC, ack_deadline_seconds=10, **options)
        )
        self.stream = self.broker.leasing.open_stream(
            SUB,
            stream_ack_deadline=10,
            max_outstanding_messages=flow[0],
            max_outstanding_bytes=flow[1],
        )
        if not batches:
            self.broker.acks._apply_batch = lambda *args: None  # type: ignore[method-assign]
            waiting = self.broker.delivery_state(SUB).waiting
            waiting.schedule.take_run = lambda now, count: []  # type: ignore[method-assign]
            window = waiting.window
            window.load_fresh = lambda want, *, held_below, most=None: None  # type: ignore[method-assign]

    def state(self) -> Any:
        delivery = self.broker.delivery_state(SUB)
        reads = delivery.reads
        dead = self.broker.delivery_state(DEAD_LETTERED).reads
        return (
            self.broker.counters(SUB),
            reads.backlog(),
            reads.leased(),
            reads.backlog_bytes(),
            reads.oldest_unacked(),
            list(delivery.leases.table),
            reads.retained(),
            [(m.message_id, leased) for m, leased in reads.peek(100)],
            [(f.outstanding_messages, f.outstanding_bytes) for f in delivery.streams.all()],
            [(m.data, m.attributes) for m, _ in dead.peek(100)],
        )


def _ack_ids(broker: Broker, operation: Any, issued: list[str]) -> list[str]:
    ids = [issued[-1 - i] for i in operation[1] if i < len(issued)]
    how = operation[2] if operation[0] in ("ack", "modack", "nack") else "as is"
    if how == "in order":  # the newest ids as issued: a unary Pull's response, acked whole
        ids = issued[len(issued) - len(ids) :]
    elif how == "shuffled":
        random.Random(len(ids)).shuffle(ids)
    elif how == "repeated":
        ids = ids + ids[:3]
    elif how == "never issued":
        ids.append("000000000000-1-1")
    if how == "with a foreign id" or not ids:
        ids.append(f"{broker.delivery_state(SUB).uid}-999999-1")
    return ids


def _answer(run: _Run, operation: Any, issued: list[str]) -> Any:
    broker = run.broker
    kind = operation[0]
    if kind == "publish":
        messages = [NewMessage(b"m%d" % i, ordering_key=operation[2]) for i in range(operation[1])]
        return broker.publishing.publish(TOPIC, messages)
    if kind == "pull":
        options = {} if operation[2] is None else {"max_bytes": operation[2]}
        deliveries = broker.leasing.pull(SUB, operation[1], **options)
        return [(d.ack_id, d.message.message_id, d.delivery_attempt) for d in deliveries]
    if kind == "stream":
        deliveries = broker.leasing.stream_pull(run.stream, operation[1])
        return [(d.ack_id, d.message.message_id, d.delivery_attempt) for d in deliveries]
    if kind == "wait":
        run.clock.advance(operation[1])
        return None
    ids = _ack_ids(broker, operation, issued)
    try:
        if kind == "ack":
            reply = broker.acks.acknowledge(SUB, ids)
        else:
            reply = broker.acks.modify_ack_deadline(SUB, ids, 0 if kind == "nack" else 20)
    except InvalidArgument as error:
        return str(error)
    return reply.confirmed, dict(reply.failures)


def _drive(runs: list[_Run], operations: list[Any]) -> None:
    issued: list[str] = []
    for operation in operations:
        answers = [_answer(run, operation, issued) for run in runs]
        assert all(answer == answers[0] for answer in answers), operation
        assert all(run.state() == runs[0].state() for run in runs), operation
        if operation[0] in ("pull", "stream"):
            issued += [ack_id for ack_id, _, _ in answers[0]]


@contextlib.contextmanager
def _both_ways(
    options: dict[str, Any],
    *,
    sqlite: bool,
    flow: tuple[int, int] = (0, 0),
    window: int = 3,
) -> Iterator[list[_Run]]:
    """The same subscription twice, by the batch paths and one at a time, in memory or
    (``sqlite``) each on a ``SqliteStore`` of its own with a window of ``window`` messages,
    in a temporary directory; the stores closed after."""
    with tempfile.TemporaryDirectory() as directory:
        stores: list[Store | None] = (
            [SqliteStore(Path(directory) / name, window=window, gc_interval=0) for name in "ab"]
            if sqlite
            else [None, None]
        )
        try:
            yield [
                _Run(store, options, batches=batches, flow=flow)
                for store, batches in zip(stores, (True, False), strict=True)
            ]
        finally:
            for store in stores:
                if store is not None:
                    store.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _operations,
    st.booleans(),
    st.booleans(),
    st.booleans(),
    # The stream's flow control: max outstanding messages and bytes (0: none); a
    # message is 2 or 3 bytes.
    st.tuples(st.sampled_from([0, 1, 4]), st.sampled_from([0, 5, 20])),
    st.sampled_from(sorted(_POLICIES)),
)
def test_batches_answer_as_one_at_a_time(
    operations: list[Any],
    exactly_once: bool,
    ordered: bool,
    sqlite: bool,
    flow: tuple[int, int],
    policies: str,
) -> None:
    options: dict[str, Any] = {
        "enable_exactly_once_delivery": exactly_once,
        "enable_message_ordering": ordered,
    }
    options.update(_POLICIES[policies])
    with _both_ways(options, sqlite=sqlite, flow=flow) as runs:
        _drive(runs, operations)


# Mostly pulls and nacks: the messages go round, their attempts used up (dead letters),
# their backoffs overlapping, some outliving the retention while leased.
_give_backs = st.lists(
    st.one_of(
        st.tuples(st.just("publish"), st.integers(1, 12), st.just("")),
        st.tuples(st.just("pull"), st.integers(1, 10), st.just(None)),
        st.tuples(st.just("pull"), st.integers(1, 10), st.just(None)),
        st.tuples(st.just("stream"), st.integers(1, 10)),
        _nack,
        _nack,
        _nack,
        st.tuples(st.just("modack"), st.lists(st.integers(0, 12), max_size=8), st.just("as is")),
        st.tuples(st.just("ack"), st.lists(st.integers(0, 12), max_size=4), st.just("as is")),
        st.tuples(st.just("wait"), st.sampled_from([1.0, 3.0, 11.0, 605.0])),
    ),
    min_size=8,
    max_size=40,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _give_backs,
    st.booleans(),
    st.booleans(),
    st.sampled_from([(0, 0), (4, 20)]),
    st.sampled_from(sorted(_POLICIES)),
)
def test_nacks_given_back_at_once_answer_as_one_at_a_time(
    operations: list[Any], exactly_once: bool, sqlite: bool, flow: tuple[int, int], policies: str
) -> None:
    """Nacks without ordering keys (``nack_many``), the batch path a nack takes."""
    options: dict[str, Any] = {"enable_exactly_once_delivery": exactly_once}
    options.update(_POLICIES[policies])
    with _both_ways(options, sqlite=sqlite, flow=flow) as runs:
        _drive(runs, operations)


@pytest.mark.parametrize("policies", sorted(_POLICIES))
@pytest.mark.parametrize("sqlite", [False, True])
@pytest.mark.parametrize("exactly_once", [False, True])
def test_whole_responses_nacked_again_and_again_as_one_at_a_time(
    policies: str, sqlite: bool, exactly_once: bool
) -> None:
    """Every message nacked until its attempts are used up (dead letters), its backoff
    growing, or until it outlived the retention while leased: the slice path of
    ``LeaseTable.end_many`` and every consequence of ``LeaseEnds.nacked_many``."""
    every = ("nack", list(range(12)), "in order")
    rounds = [("pull", 10, None), ("pull", 10, None), every, ("wait", 11.0)] * 6
    operations = [("publish", 12, ""), *rounds, ("wait", 590.0), ("pull", 10, None)]
    operations += [("wait", 6.0), ("nack", list(range(10)), "shuffled"), ("pull", 10, None)]
    options: dict[str, Any] = {"enable_exactly_once_delivery": exactly_once}
    options.update(_POLICIES[policies])
    with _both_ways(options, sqlite=sqlite, window=5) as runs:
        _drive(runs, operations)
        counters = runs[0].broker.counters(SUB)
    if policies == "dead letters":
        assert counters["dead_lettered"] == 12
    if policies == "retention":
        assert counters["discarded"] > 0


def _misses_of(delivery: Any, batch_path: str) -> list[int]:
    """How many ids each call of ``delivery``'s ``batch_path`` (``ack_many``,
    ``extend_many``, ``nack_many``) left for the one-by-one path, a count a call, from
    now on."""
    called: list[int] = []
    apply = getattr(delivery, batch_path)

    def spy(*args: Any, **kwargs: Any) -> Any:
        misses = apply(*args, **kwargs)
        called.append(len(misses))
        return misses

    setattr(delivery, batch_path, spy)
    return called


def test_a_nack_of_fresh_ids_takes_the_batch_path() -> None:
    run = _Run(None, {"retry_policy": RetryPolicy(5.0, 60.0)}, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    delivery = run.broker.delivery_state(SUB)
    ids = [d.ack_id for d in run.broker.leasing.pull(SUB, 5)]
    called = _misses_of(delivery, "nack_many")
    reply = run.broker.acks.modify_ack_deadline(SUB, ids, 0)
    assert called == [0]
    assert reply.confirmed == tuple(ids)
    assert delivery.counters.nacked == 5
    assert run.broker.leasing.pull(SUB, 5) == []  # the backoff: 5 s
    run.clock.advance(5)
    again = run.broker.leasing.pull(SUB, 5)
    assert [d.message.message_id for d in again] == ["1", "2", "3", "4", "5"]


def test_attempts_given_back_at_once_survive_a_restart(tmp_path: Path) -> None:
    """The store is handed each nacked lease's end (``Leases.end_many``): after a restart
    the messages come again with their failed attempts counted."""
    options = {"dead_letter_policy": DeadLetterPolicy(DEAD_LETTERS, 5)}
    store = SqliteStore(tmp_path / "data", window=3, gc_interval=0)
    run = _Run(store, options, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    for _ in range(2):
        ids = [d.ack_id for d in run.broker.leasing.pull(SUB, 5)]
        assert run.broker.acks.modify_ack_deadline(SUB, ids, 0).confirmed == tuple(ids)
    store.close()
    store = SqliteStore(tmp_path / "data", window=3, gc_interval=0)
    try:
        restarted = Broker(run.clock, store=store)
        again = restarted.leasing.pull(SUB, 10)
        assert [d.delivery_attempt for d in again] == [3] * 5
    finally:
        store.close()


def test_an_acknowledge_of_fresh_ids_takes_the_batch_path() -> None:
    run = _Run(None, {}, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    delivery = run.broker.delivery_state(SUB)
    ids = [d.ack_id for d in run.broker.leasing.pull(SUB, 5)]
    called = _misses_of(delivery, "ack_many")
    reply = run.broker.acks.acknowledge(SUB, ids)
    assert called == [0]
    assert reply.confirmed == tuple(ids)
    assert run.broker.counters(SUB)["acked"] == 5


def test_a_modack_of_fresh_ids_takes_the_batch_path() -> None:
    run = _Run(None, {"enable_exactly_once_delivery": True}, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    delivery = run.broker.delivery_state(SUB)
    ids = [d.ack_id for d in run.broker.leasing.pull(SUB, 5)]
    called = _misses_of(delivery, "extend_many")
    reply = run.broker.acks.modify_ack_deadline(SUB, ids, 60)
    assert called == [0]
    assert reply.confirmed == tuple(ids)
    assert run.broker.delivery_state(SUB).counters.modacked == 5
    run.clock.advance(30)  # past the first deadline (10 s), within the new one
    assert run.broker.acks.acknowledge(SUB, ids).confirmed == tuple(ids)


def test_leases_extended_at_once_survive_a_restart(tmp_path: Path) -> None:
    """The store is handed the moved leases (``Leases.extend_many``): after a restart an
    ack id still resolves until its extended deadline."""
    store = SqliteStore(tmp_path / "data", window=3, gc_interval=0)
    run = _Run(store, {"enable_exactly_once_delivery": True}, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    deliveries = run.broker.leasing.pull(SUB, 5)
    ids = [d.ack_id for d in reversed(deliveries)]  # not in seq order
    assert run.broker.acks.modify_ack_deadline(SUB, ids, 60).confirmed == tuple(ids)
    store.close()
    store = SqliteStore(tmp_path / "data", window=3, gc_interval=0)
    try:
        restarted = Broker(run.clock, store=store)
        run.clock.advance(30)
        assert restarted.acks.acknowledge(SUB, ids).confirmed == tuple(ids)
        assert restarted.leasing.pull(SUB, 10) == []
    finally:
        store.close()


def test_a_pull_of_fresh_messages_takes_them_as_one_run() -> None:
    run = _Run(None, {}, batches=True)
    run.broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(5)])
    schedule = run.broker.delivery_state(SUB).waiting.schedule
    take_run = schedule.take_run
    taken: list[int] = []

    def spy(now: float, count: int) -> Any:
        entries = take_run(now, count)
        taken.append(len(entries))
        return entries

    schedule.take_run = spy  # type: ignore[method-assign]
    deliveries = run.broker.leasing.pull(SUB, 10)
    assert [d.message.message_id for d in deliveries] == ["1", "2", "3", "4", "5"]
    assert taken[0] == 5


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.lists(
        st.tuples(
            st.integers(0, 20),
            st.integers(0, 8),
            st.sampled_from(["as leased", "older", "newer", "zero"]),
        ),
        max_size=6,
    ),
    st.booleans(),
    st.sampled_from([5.0, 15.0, 25.0]),
)
def test_a_slice_of_the_lease_table_settles_as_each_lease_alone(
    pulls: list[int], requests: list[tuple[int, int, str]], exact: bool, now: float
) -> None:
    """``LeaseTable.settle_many``'s whole-slice path against its loop (switched off)."""
    tables = [LeaseTable(), LeaseTable()]
    tables[1]._settle_slice = lambda *args, **kwargs: None  # type: ignore[method-assign]
    seq = 0
    leased: dict[int, int] = {}  # seq -> generation
    for pull, count in enumerate(pulls):
        seqs = list(range(seq + 1, seq + count + 1))
        seq += count
        leased.update((s, 1 + pull % 2) for s in seqs)
        for table in tables:
            table.add_many(
                10.0 * (pull + 1),
                NewLeases(seqs, [1 + pull % 2] * count, [3] * count, [0] * count, [1.0] * count),
            )
    for start, length, how in requests:
        seqs = list(range(start, start + length))
        generations = [leased.get(s, 1) for s in seqs]
        if how != "as leased" and generations:
            generations[len(generations) // 2] += {"older": -1, "newer": 1, "zero": -99}[how]
            generations = [max(g, 0) for g in generations]
        answers = [table.settle_many(seqs, generations, now, exact=exact) for table in tables]
        assert answers[0] == answers[1]
        assert [list(table) for table in tables[1:]] == [list(tables[0])]
        assert [(len(t), t.bytes) for t in tables[1:]] == [(len(tables[0]), tables[0].bytes)]
