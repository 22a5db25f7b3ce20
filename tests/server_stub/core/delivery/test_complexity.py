"""Broker core: delivery, ack and expiry cost O(log n) in the backlog n — without timing.

The same workload (pull, ack, nack, expire and stream 1000+ messages) runs on top of a
backlog of 10,000 and of 200,000 messages, and three machine-independent costs are
compared:

* Python lines executed inside ``eoclient/server_stub/core`` (``sys.settrace``):
  catches any Python-level scan of the backlog;
* order comparisons between sequence numbers (the publisher's counter is seeded with an
  int that counts ``<``, ``<=``, ``>`` and ``>=`` and stays one when incremented, so every
  message is numbered with one): heap work grows like log n (≈ 1.3x from 10k to 200k),
  while a sort, ``heapify``, ``min`` or ``max`` over the backlog would grow 20x without
  executing one more Python line;
* calls into ``heapq`` (a counting wrapper around the module the schedule, the window,
  the lease table and its deadline records use): catches stale heap entries piling up
  and being skipped one by one.
"""

from __future__ import annotations

import heapq
import sys
from collections import Counter
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from eoclient._clock import FakeClock
from eoclient.server_stub.core import (
    Broker,
    DeadLetterPolicy,
    NewMessage,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.delivery import lease_deadlines, lease_table, schedule, window

from ..support import DLT, PROJECT, TOPIC

PLAIN = f"{PROJECT}/subscriptions/plain"
ORDERED = f"{PROJECT}/subscriptions/ordered"
CORE_DIR = "eoclient/server_stub/core/"


class CountingInt(int):
    """A sequence number that counts the order comparisons made on it.

    ``seq + 1`` is a CountingInt again, so seeding the publisher's counter with one makes
    every sequence number that follows one (the broker numbers messages by incrementing).
    Equality and hashing stay int's: an ack id parses back to a plain int that still finds
    its entry."""

    comparisons = 0

    def __add__(self, other: int) -> CountingInt:
        return CountingInt(int(self) + other)

    def __lt__(self, other: int) -> bool:
        CountingInt.comparisons += 1
        return int(self) < other

    def __le__(self, other: int) -> bool:
        CountingInt.comparisons += 1
        return int(self) <= other

    def __gt__(self, other: int) -> bool:
        CountingInt.comparisons += 1
        return int(self) > other

    def __ge__(self, other: int) -> bool:
        CountingInt.comparisons += 1
        return int(self) >= other

    __hash__ = int.__hash__


class CountingHeapq:
    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()

    def heappush(self, heap: list[Any], item: Any) -> None:
        self.calls["push"] += 1
        heapq.heappush(heap, item)

    def heappop(self, heap: list[Any]) -> Any:
        self.calls["pop"] += 1
        return heapq.heappop(heap)

    def __getattr__(self, name: str) -> Any:
        self.calls[name] += 1
        return getattr(heapq, name)


def build(backlog: int) -> tuple[FakeClock, Broker]:
    clock = FakeClock()
    broker = Broker(clock, record_history=False)
    broker.publishing.last_seq = CountingInt(broker.publishing.last_seq)
    broker.topics.create(TopicConfig(TOPIC))
    broker.topics.create(TopicConfig(DLT))
    # Acked messages are retained (a heap by publish time) and failures are counted
    # toward dead lettering: neither may cost more with a bigger backlog.
    broker.subscriptions.create(
        SubscriptionConfig(
            PLAIN,
            TOPIC,
            enable_exactly_once_delivery=True,
            ack_deadline_seconds=10,
            retain_acked_messages=True,
            dead_letter_policy=DeadLetterPolicy(DLT, 5),
        )
    )
    broker.subscriptions.create(
        SubscriptionConfig(
            ORDERED,
            TOPIC,
            enable_exactly_once_delivery=True,
            enable_message_ordering=True,
            ack_deadline_seconds=10,
        )
    )
    batch = 1000
    for start in range(0, backlog, batch):
        # 100 ordering keys: each publish request carries one key.
        key = f"key-{(start // batch) % 100}"
        broker.publishing.publish(TOPIC, [NewMessage(b"x", ordering_key=key)] * batch)
    return clock, broker


def workload(clock: FakeClock, broker: Broker) -> int:
    """Pull/ack/nack/expire/stream on both subscriptions; returns deliveries made."""
    delivered = 0
    for name in (PLAIN, ORDERED):
        for _ in range(10):
            batch = broker.leasing.pull(name, 100)
            delivered += len(batch)
            assert len(batch) == 100
            acked, nacked = batch[:80], batch[80:90]
            assert broker.acks.acknowledge(name, [d.ack_id for d in acked]).ok
            # Last first: on the ordered subscription a nack also ends the leases of the
            # key's later messages, which would make their ids invalid.
            nack_ids = [d.ack_id for d in reversed(nacked)]
            assert broker.acks.modify_ack_deadline(name, nack_ids, 0).ok
            # the last 10 of each batch are left to expire
        clock.advance(10)
        broker.tick()
        redelivered = broker.leasing.pull(name, 1000)
        delivered += len(redelivered)
        assert len(redelivered) >= 200
        assert broker.acks.acknowledge(name, [d.ack_id for d in redelivered]).ok
        stream = broker.leasing.open_stream(
            name, stream_ack_deadline=10, max_outstanding_messages=50
        )
        for _ in range(5):
            batch = broker.leasing.stream_pull(stream)
            delivered += len(batch)
            assert len(batch) == 50
            assert broker.acks.acknowledge(name, [d.ack_id for d in batch]).ok
        broker.leasing.close_stream(stream)
    clock.advance(10)
    broker.tick()
    return delivered


def _core_lines_while(action: Callable[[], object]) -> int:
    """Python lines executed inside the broker core while ``action()`` runs."""
    lines = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal lines
        if CORE_DIR not in frame.f_code.co_filename.replace("\\", "/"):
            return None
        if event == "line":
            lines += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        action()
    finally:
        sys.settrace(previous)
    return lines


def measure(backlog: int, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    clock, broker = build(backlog)
    counting = CountingHeapq()
    for module in (schedule, window, lease_deadlines, lease_table):
        monkeypatch.setattr(module, "heapq", counting)
    CountingInt.comparisons = 0
    delivered = 0

    def run() -> None:
        nonlocal delivered
        delivered = workload(clock, broker)

    try:
        lines = _core_lines_while(run)
    finally:
        monkeypatch.undo()

    # Heaps stay bounded: nothing outstanding now, so no lease or delay entries remain
    # once the last deadlines passed; the ready heap holds at most the backlog.
    for name in (PLAIN, ORDERED):
        state = broker._resources.subscriptions[name].delivery
        broker.leasing.pull(name, 1)  # processes expiries, consumes one message
        assert state.leases.table.records() <= 1
        ready, delayed = state.waiting.schedule.entries()
        assert delayed == 0
        assert ready <= state.reads.backlog()
    return {
        "delivered": delivered,
        "lines": lines,
        "comparisons": CountingInt.comparisons,
        "heap_calls": sum(counting.calls.values()),
    }


@pytest.mark.slow
def test_delivery_ack_and_expiry_cost_does_not_grow_with_the_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = measure(10_000, monkeypatch)
    large = measure(200_000, monkeypatch)
    assert small["delivered"] == large["delivered"] > 1000
    # Identical code paths: the line count may differ only by a few stale-entry skips.
    assert large["lines"] <= small["lines"] * 1.1, (small, large)
    assert large["heap_calls"] <= small["heap_calls"] * 1.1, (small, large)
    # The counter is live: the heaps order messages by sequence number, so the workload
    # compares them thousands of times (zero would mean the seeding no longer reaches the
    # sequence numbers, and the bound below would hold for any code).
    assert small["comparisons"] > small["delivered"], (small, large)
    # log2(200k) / log2(10k) ≈ 1.3; anything linear in the backlog would be ~20x.
    assert large["comparisons"] <= small["comparisons"] * 2, (small, large)


def test_acked_lease_records_do_not_pile_up_until_their_deadlines() -> None:
    """Stale lease records (acked before their deadline) are compacted away: the heap
    stays within a constant of the live leases, not ack rate x ack deadline."""
    clock = FakeClock()
    broker = Broker(clock, record_history=False)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(PLAIN, TOPIC, ack_deadline_seconds=600))
    delivery = broker._resources.subscriptions[PLAIN].delivery
    for _ in range(50):
        broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 1000)
        deliveries = broker.leasing.pull(PLAIN, 1000)
        broker.acks.acknowledge(PLAIN, [d.ack_id for d in deliveries])
        clock.advance(0.1)  # 50,000 acks within one 600 s deadline
    assert delivery.leases.table.records() <= 2 * 0 + delivery.leases.table.SLACK + 1


def test_compacting_stale_lease_records_does_not_scan_the_backlog() -> None:
    """Acks enough to compact the lease heap several times (every LEASE_HEAP_SLACK stale
    records) cost the same on a backlog of 20,000 as on one of 200,000: the compaction
    filters the heap's own records, not every message the subscription holds (it used
    to, and was a fifth of the server's CPU in a Pull/Ack benchmark on 200,000)."""

    def lines_for(backlog: int) -> int:
        clock = FakeClock()
        broker = Broker(clock, record_history=False)
        broker.topics.create(TopicConfig(TOPIC))
        broker.subscriptions.create(
            SubscriptionConfig(PLAIN, TOPIC, enable_exactly_once_delivery=True)
        )
        for _ in range(backlog // 1000):
            broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 1000)
        slack = broker._resources.subscriptions[PLAIN].delivery.leases.table.SLACK

        def pull_and_ack() -> None:
            for _ in range(3 * slack // 1000 + 1):
                deliveries = broker.leasing.pull(PLAIN, 1000)
                assert broker.acks.acknowledge(PLAIN, [d.ack_id for d in deliveries]).ok

        return _core_lines_while(pull_and_ack)

    small, large = lines_for(20_000), lines_for(200_000)
    assert large <= small * 1.1, (small, large)


def test_one_ack_id_extended_many_times_in_one_request_leaves_one_lease_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A ModifyAckDeadline repeating one ack id pushes identical lease records (one clock
    reading a request); the compaction keeps one of them, not all — kept, every later
    extend would rebuild the heap again, quadratic in the repeats."""
    clock = FakeClock()
    broker = Broker(clock, record_history=False)
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(PLAIN, TOPIC))
    broker.publishing.publish(TOPIC, [NewMessage(b"x")])
    [delivery] = broker.leasing.pull(PLAIN, 1)
    state = broker._resources.subscriptions[PLAIN].delivery
    repeats = 3 * state.leases.table.SLACK
    counting = CountingHeapq()
    monkeypatch.setattr(lease_deadlines, "heapq", counting)
    assert broker.acks.modify_ack_deadline(PLAIN, [delivery.ack_id] * repeats, 60).ok
    monkeypatch.undo()
    assert state.leases.table.records() <= state.leases.table.SLACK + 1
    assert counting.calls["heapify"] <= repeats // state.leases.table.SLACK + 1
