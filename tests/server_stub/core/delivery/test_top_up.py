"""The window topped up between requests against the window refilled only inside them.

After a unary Pull's answer the server loads the window back up by at most one Pull's
worth of cold rows (``SubscriptionDelivery.top_up``, ``Retention.top_up``, the Pull's
``after_answer`` in services/subscriber.py), so that the next request need not refill it.

While no lease ends without an ack, loading rows early changes nothing a client or an
operator sees: on random scenarios (publishes, pulls, acks, time passing, the retention and
the message TTL; plain and exactly-once, with and without ordering keys, on SQLite with a
small window) a broker whose window is topped up after every Pull and at random moments
must answer and end up exactly as one whose window never is. A lease that ends without an
ack (a nack, an expiry) brings its message back to a window whose body only the store
keeps; a fuller window can then deliver it at another turn (sooner: a top-up loads it
first, as any refill does — or later, behind the rows loaded before it came back), as it
can today whenever the window holds messages. So there the two brokers must deliver the
same messages, each ordering key's first deliveries in its order, and end with nothing
left once both are drained.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eoclient._clock import FakeClock
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.policies import SubscriptionPolicies
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/top-up"
SUB = "projects/p1/subscriptions/top-up"

_publish = st.tuples(st.just("publish"), st.integers(1, 12), st.sampled_from(["", "k1", "k2"]))
_pull = st.tuples(st.just("pull"), st.integers(1, 10))
# Which issued ids (by position, counted from the newest).
_ack = st.tuples(st.just("ack"), st.lists(st.integers(0, 40), max_size=15))
# A top-up of at most this many rows, in the topping run only.
_top_up = st.tuples(st.just("top up"), st.sampled_from([1, 2, 5]))
# Time passes: past the TTL (40 s) and the retention (600 s), never past an ack deadline
# (600 s) with a lease ending without an ack: a lease expiring then is past the retention
# too (dropped), and with a longer retention the clock stays below it (``_Run.answer``).
_quiet = st.lists(
    st.one_of(
        _publish,
        _pull,
        _ack,
        _top_up,
        st.tuples(st.just("wait"), st.sampled_from([1.0, 45.0, 300.0, 650.0])),
    ),
    max_size=30,
)
# With leases that end without an ack: nacks, and waits past the ack deadline.
_returning = st.lists(
    st.one_of(
        _publish,
        _pull,
        _ack,
        _top_up,
        st.tuples(st.just("nack"), st.lists(st.integers(0, 40), max_size=5)),
        st.tuples(st.just("wait"), st.sampled_from([1.0, 11.0])),
    ),
    max_size=30,
)


class _Run:
    """One broker of the pair, on its own store; ``top_up``: at most this many rows
    loaded after each Pull (None: never, and no top-up operation either)."""

    def __init__(
        self, store: SqliteStore, options: dict[str, Any], top_up: int | None, deadline: int
    ) -> None:
        self.clock = FakeClock()
        self.started = self.clock.now()
        self.broker = Broker(self.clock, store=store, rng=random.Random(7), record_history=False)
        self.broker.topics.create(TopicConfig(TOPIC))
        self.broker.subscriptions.create(
            SubscriptionConfig(SUB, TOPIC, ack_deadline_seconds=deadline, **options)
        )
        self.top_up = top_up
        self.delivered: list[tuple[str, str]] = []  # (message id, ordering key), in order

    def answer(self, operation: Any, issued: list[str]) -> Any:
        broker, kind = self.broker, operation[0]
        if kind == "publish":
            messages = [
                NewMessage(b"m%d" % i, ordering_key=operation[2]) for i in range(operation[1])
            ]
            return broker.publishing.publish(TOPIC, messages)
        if kind == "pull":
            deliveries = broker.leasing.pull(SUB, operation[1])
            if self.top_up is not None:
                broker.delivery_state(SUB).top_up(self.top_up)
            self.delivered += [(d.message.message_id, d.message.ordering_key) for d in deliveries]
            return [(d.ack_id, d.message.message_id, d.delivery_attempt) for d in deliveries]
        if kind == "wait":
            retention = broker.delivery_state(SUB).rules.retention
            # Without a retention of 600 s (the default keeps messages for 7 days) a
            # lease must not expire: see ``_quiet``.
            if retention > 600 and self.clock.now() + operation[1] - self.started >= 590:
                return None
            self.clock.advance(operation[1])
            return None
        if kind == "top up":
            if self.top_up is not None:
                broker.delivery_state(SUB).top_up(operation[1])
            return None
        ids = [issued[-1 - i] for i in operation[1] if i < len(issued)]
        if not ids:
            return None
        if kind == "ack":
            reply = broker.acks.acknowledge(SUB, ids)
        else:
            reply = broker.acks.modify_ack_deadline(SUB, ids, 0)
        return reply.confirmed, dict(reply.failures)

    def state(self) -> Any:
        delivery = self.broker.delivery_state(SUB)
        reads = delivery.reads
        return (
            self.broker.counters(SUB),
            reads.backlog(),
            reads.backlog_bytes(),
            reads.leased(),
            reads.oldest_unacked(),
            sorted(lease.seq for lease in delivery.leases.table),
            delivery.next_wakeup(),
        )


def _pair(directory: str, options: dict[str, Any], top_up: int, deadline: int) -> list[_Run]:
    stores = [SqliteStore(Path(directory) / name, window=3, gc_interval=0) for name in "ab"]
    return [
        _Run(stores[0], options, top_up, deadline),
        _Run(stores[1], options, None, deadline),
    ]


def _close(runs: list[_Run]) -> None:
    for run in runs:
        run.broker.store.close()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    _quiet,
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 600.0]),
    st.sampled_from([None, 40.0]),
    st.sampled_from([1, 3]),
)
def test_a_topped_up_window_answers_as_one_refilled_in_requests(
    operations: list[Any],
    exactly_once: bool,
    ordered: bool,
    retention: float | None,
    ttl: float | None,
    top_up: int,
) -> None:
    options = {
        "enable_exactly_once_delivery": exactly_once,
        "enable_message_ordering": ordered,
        "message_retention_duration": retention,
        "policies": SubscriptionPolicies(message_ttl=ttl),
    }
    with tempfile.TemporaryDirectory() as directory:
        runs = _pair(directory, options, top_up, 600)
        try:
            issued: list[str] = []
            for operation in operations:
                answers = [run.answer(operation, issued) for run in runs]
                assert answers[0] == answers[1], operation
                assert runs[0].state() == runs[1].state(), operation
                if operation[0] == "pull":
                    issued += [ack_id for ack_id, _, _ in answers[0]]
        finally:
            _close(runs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_returning, st.booleans(), st.booleans(), st.sampled_from([1, 3]))
def test_with_returned_messages_a_topped_up_window_delivers_the_same_messages(
    operations: list[Any], exactly_once: bool, ordered: bool, top_up: int
) -> None:
    options = {"enable_exactly_once_delivery": exactly_once, "enable_message_ordering": ordered}
    with tempfile.TemporaryDirectory() as directory:
        runs = _pair(directory, options, top_up, 10)
        try:
            for run in runs:  # each acks only what it was given
                issued: list[str] = []
                for operation in operations:
                    answer = run.answer(operation, issued)
                    if operation[0] == "pull":
                        issued += [ack_id for ack_id, _, _ in answer]
                for _ in range(1000):  # drained: every message delivered, then acked
                    run.clock.advance(11)
                    pulled = run.answer(("pull", 10), [])
                    if not pulled and not run.broker.delivery_state(SUB).reads.backlog():
                        break
                    ids = [ack_id for ack_id, _, _ in pulled]
                    run.answer(("ack", list(range(len(ids)))), ids)
                assert run.broker.delivery_state(SUB).reads.backlog() == 0
                if ordered:  # a key's messages are first delivered in its order
                    first: dict[str, list[int]] = {}
                    for message_id, key in dict.fromkeys(run.delivered):
                        first.setdefault(key or message_id, []).append(int(message_id))
                    assert all(seqs == sorted(seqs) for seqs in first.values())
            assert {m for m, _ in runs[0].delivered} == {m for m, _ in runs[1].delivered}
        finally:
            _close(runs)


def _topped(
    store: SqliteStore, count: int, clock: FakeClock | None = None, **options: Any
) -> Broker:
    """A broker on ``store`` with ``count`` messages published to ``SUB`` (its other
    ``options``)."""
    broker = Broker(clock or FakeClock(), store=store, rng=random.Random(7), record_history=False)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC, ack_deadline_seconds=10, **options))
    broker.publishing.publish(TOPIC, [NewMessage(b"x") for _ in range(count)])
    return broker


def test_a_top_up_loads_at_most_its_rows_and_only_into_a_short_window(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path, window=10, gc_interval=0)
    try:
        broker = _topped(store, 30)  # 10 in the window, 20 cold
        window = broker.delivery_state(SUB).waiting.window
        assert (len(window.entries), window.cold()) == (10, 20)
        broker.delivery_state(SUB).top_up(5)  # full: nothing to load
        assert (len(window.entries), window.cold()) == (10, 20)
        broker.leasing.pull(SUB, 8)
        broker.delivery_state(SUB).top_up(5)
        assert (len(window.entries), window.cold()) == (7, 15)
        broker.delivery_state(SUB).top_up(5)  # up to the window's size, not past it
        assert (len(window.entries), window.cold()) == (10, 12)
    finally:
        store.close()


def test_rows_a_top_up_loaded_leave_by_the_retention(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path, window=10, gc_interval=0)
    try:
        clock = FakeClock()
        broker = _topped(store, 30, clock, message_retention_duration=600.0)
        broker.leasing.pull(SUB, 8)
        delivery = broker.delivery_state(SUB)
        delivery.top_up(5)
        window = delivery.waiting.window
        assert (len(window.entries), window.cold()) == (7, 15)
        clock.advance(650)
        # Past the retention: the 7 in the window (5 of them loaded by the top-up) and the
        # 15 cold rows are dropped, and so are the 8 leases as they expire.
        delivery = broker.delivery_state(SUB)
        assert broker.counters(SUB)["discarded"] == 30
        assert (delivery.reads.backlog(), len(window.entries), window.cold()) == (0, 0, 0)
    finally:
        store.close()
