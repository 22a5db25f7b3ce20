"""Broker core: Hypothesis stateful properties over random publish/pull/ack/modack/time/streams.

A small model runs next to the broker. It knows, per message, whether it is waiting,
outstanding (under which ack id, until when, on which stream) or acknowledged, and applies
the rules of docs/protocol.md#ack-id-state-machine and docs/protocol.md#ordering-keys to
predict every exactly-once ack/modack result. Checked after every step or delivery:

1. a message whose ack succeeded (on exactly-once: not in ``failures``) is never
   delivered again;
2. a stream's outstanding messages/bytes never go negative (and match the model);
3. every published message is acknowledged, outstanding or waiting:
   backlog + acknowledged == published;
4. with ordering, a key's deliveries never go backwards except as a redelivery of
   the whole suffix after a nack or expiry (when message i of a key is delivered,
   every earlier one is outstanding or acknowledged and no later one is outstanding);
5. no message is delivered while a live lease for it exists;

plus: each delivery has a new ack id, ``delivery_attempt`` follows nacks and
expiries, stream flow control is respected, and after enough time everything can be
drained (no key is ever stuck).

The Pulsar-style policies act in the same model (core/policies.py): a message skipped by
id, acknowledged by the message TTL or evicted by a backlog quota is acknowledged like a
subscriber's ack — its ack ids stop resolving, it is never delivered again, and its key's
next message moves up — and the skip outcomes and counters match the model's.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from eoclient._clock import FakeClock
from eoclient.errors import InvalidArgument
from eoclient.server_stub.core import (
    Broker,
    DeadLetterPolicy,
    Delivery,
    NewMessage,
    RetryPolicy,
    SubscriptionConfig,
    TopicConfig,
)
from eoclient.server_stub.core.policies import BacklogQuota, QuotaAction, SkipOutcome, TopicPolicies
from eoclient.server_stub.core.store import Store
from eoclient.server_stub.storage.sqlite import SqliteStore

from .support import DLT, INVALID, SUB, TOPIC, UNORDERED

WAITING, OUTSTANDING, ACKED = "waiting", "outstanding", "acked"


@dataclass
class Msg:
    message_id: str
    seq: int  # publish order
    key: str  # ordering key as the subscription sees it ("" when ordering is off)
    state: str = WAITING
    ack_id: str = ""  # latest delivery's id
    deadline: float = 0.0
    stream: int | None = None
    failed: int = 0  # own nacks + own expiries
    published: float = 0.0
    size: int = 0


@dataclass
class Stream:
    max_messages: int
    max_bytes: int
    deadline: int


class BrokerMachine(RuleBasedStateMachine):
    # ---------------------------------------------------------------- set-up

    def new_store(self) -> Store | None:
        return None  # MemoryStore

    @initialize(
        exactly_once=st.booleans(),
        ordering=st.booleans(),
        retry=st.sampled_from([None, (0.0, 0.0), (1.0, 5.0), (10.0, 600.0)]),
        dead_letter=st.sampled_from([None, 5, 100]),
        ack_deadline=st.sampled_from([10, 30]),
        ttl=st.sampled_from([None, None, 20.0]),
        evict_over=st.sampled_from([None, None, 12]),
    )
    def setup(
        self,
        exactly_once: bool,
        ordering: bool,
        retry: tuple[float, float] | None,
        dead_letter: int | None,
        ack_deadline: int,
        ttl: float | None,
        evict_over: int | None,
    ) -> None:
        self.clock = FakeClock()
        self.broker = Broker(self.clock, store=self.new_store())
        self.broker.topics.create(TopicConfig(TOPIC))
        self.broker.topics.create(TopicConfig(DLT))
        self.exactly_once = exactly_once
        self.ordering = ordering
        self.dead_letter = dead_letter is not None
        self.max_attempts = dead_letter  # forwarded (settled here) after this many failures
        self.dead_lettered = 0
        self.ack_deadline = ack_deadline
        self.broker.subscriptions.create(
            SubscriptionConfig(
                SUB,
                TOPIC,
                ack_deadline_seconds=ack_deadline,
                enable_exactly_once_delivery=exactly_once,
                enable_message_ordering=ordering,
                retry_policy=RetryPolicy(*retry) if retry else None,
                dead_letter_policy=DeadLetterPolicy(DLT, dead_letter) if dead_letter else None,
            )
        )
        self.messages: dict[str, Msg] = {}
        self.keys: dict[str, list[Msg]] = {}
        self.owner: dict[str, Msg] = {}  # every ack id ever issued → its message
        self.issued: list[str] = []
        self.streams: dict[int, Stream] = {}
        self.sizes: dict[str, int] = {}
        self.ttl = ttl
        self.evict_over = evict_over
        self.expired_by_ttl = 0
        self.evicted = 0
        self.skipped = 0
        self.broker.topics.set_policies(
            TOPIC,
            TopicPolicies(
                message_ttl=ttl,
                backlog_quota=BacklogQuota(limit_bytes=evict_over, action=QuotaAction.EVICTION)
                if evict_over
                else None,
            ),
        )

    # ----------------------------------------------------------------- model

    def now(self) -> float:
        return self.clock.now()

    def release(self, msg: Msg, to: str) -> None:
        msg.state = to
        msg.stream = None

    def rewind_followers(self, msg: Msg) -> None:
        """Ordering: a nacked/expired message takes its key's later leases with it."""
        if not msg.key:
            return
        for follower in self.keys[msg.key]:
            if follower.seq > msg.seq and follower.state == OUTSTANDING:
                self.release(follower, WAITING)

    def failed(self, msg: Msg) -> None:
        """A nack or expiry of ``msg``: back to waiting with its key's later leases, or,
        when that was its last allowed attempt, dead-lettered (settled like an ack)."""
        msg.failed += 1
        self.release(msg, WAITING)
        self.rewind_followers(msg)
        if self.max_attempts is not None and msg.failed >= self.max_attempts:
            self.release(msg, ACKED)
            self.dead_lettered += 1

    def expire(self) -> None:
        now = self.now()
        due = sorted(
            (m for m in self.messages.values() if m.state == OUTSTANDING and m.deadline <= now),
            key=lambda m: (m.deadline, m.seq),
        )
        for msg in due:
            if msg.state != OUTSTANDING:
                continue  # taken back by an earlier message of its key
            self.failed(msg)
        if self.ttl is not None:  # then the TTL acknowledges what is too old, leased or not
            for msg in self.messages.values():
                if msg.state != ACKED and msg.published <= now - self.ttl:
                    self.release(msg, ACKED)
                    self.expired_by_ttl += 1

    def evict(self) -> None:
        """The backlog quota, at publish: the oldest unacked go until within the limit."""
        if self.evict_over is None:
            return
        unacked = sorted(
            (m for m in self.messages.values() if m.state != ACKED), key=lambda m: m.seq
        )
        backlog = sum(m.size for m in unacked)
        if backlog <= self.evict_over:
            return
        for msg in unacked:
            if backlog <= self.evict_over:
                break
            self.release(msg, ACKED)
            backlog -= msg.size
            self.evicted += 1

    def stream_load(self, stream_id: int) -> tuple[int, int]:
        held = [
            m for m in self.messages.values() if m.state == OUTSTANDING and m.stream == stream_id
        ]
        return len(held), sum(self.sizes[m.message_id] for m in held)

    def delivered(self, deliveries: list[Delivery], deadline: int, stream_id: int | None) -> None:
        now = self.now()
        for d in deliveries:
            msg = self.messages[d.message.message_id]
            # (1) never after a successful ack; (5) never while a live lease exists.
            assert msg.state != ACKED, f"{msg} delivered after its ack succeeded"
            assert msg.state != OUTSTANDING, f"{msg} delivered while its lease is live"
            # (4) ordering: earlier messages delivered or acked, later ones not leased.
            if msg.key:
                for other in self.keys[msg.key]:
                    if other.seq < msg.seq:
                        assert other.state in (OUTSTANDING, ACKED), (msg, other)
                    elif other.seq > msg.seq:
                        assert other.state != OUTSTANDING, (msg, other)
            assert d.ack_id not in self.owner, "ack id reused"
            expected_attempt = msg.failed + 1 if self.dead_letter else 0
            assert d.delivery_attempt == expected_attempt
            if stream_id is not None:
                spec = self.streams[stream_id]
                count, size = self.stream_load(stream_id)
                assert count == 0 or (
                    (spec.max_messages <= 0 or count < spec.max_messages)
                    and (spec.max_bytes <= 0 or size < spec.max_bytes)
                ), "stream flow control exceeded"
            msg.state = OUTSTANDING
            msg.ack_id = d.ack_id
            msg.deadline = now + deadline
            msg.stream = stream_id
            self.owner[d.ack_id] = msg
            self.issued.append(d.ack_id)

    def check_streams(self) -> None:
        """Right after a broker call (which processes due expiries): counts match the model."""
        delivery = self.broker._resources.subscriptions[SUB].delivery
        for stream_id in self.streams:
            flow = delivery.streams.get(stream_id)
            assert flow is not None
            actual = (flow.outstanding_messages, flow.outstanding_bytes)
            assert actual == self.stream_load(stream_id)

    def valid(self, ack_id: str) -> Msg | None:
        msg = self.owner.get(ack_id)
        if msg is not None and msg.state == OUTSTANDING and msg.ack_id == ack_id:
            return msg
        return None

    def apply_ack(self, ack_ids: list[str]) -> dict[str, str]:
        failures: dict[str, str] = {}
        for ack_id in ack_ids:
            msg = self.valid(ack_id)
            if self.exactly_once:
                if msg is None:
                    failures[ack_id] = INVALID
                elif msg.key and any(
                    o.seq < msg.seq and o.state != ACKED for o in self.keys[msg.key]
                ):
                    failures[ack_id] = UNORDERED
                else:
                    self.release(msg, ACKED)
            else:
                # Best effort: any issued id of an unacked message settles it.
                stale = self.owner.get(ack_id)
                if stale is not None and stale.state != ACKED:
                    self.release(stale, ACKED)
        return failures

    def apply_modack(self, ack_ids: list[str], seconds: int) -> dict[str, str]:
        failures: dict[str, str] = {}
        for ack_id in ack_ids:
            msg = self.valid(ack_id)
            if msg is None:
                if self.exactly_once:
                    failures[ack_id] = INVALID
            elif seconds == 0:
                self.failed(msg)
            else:
                msg.deadline = self.now() + seconds
        return failures

    def check_reply(self, ack_ids: list[str], reply: object, expected: dict[str, str]) -> None:
        assert reply.failures == expected  # type: ignore[attr-defined]
        confirmed = [a for a in ack_ids if a not in expected]
        assert list(reply.confirmed) == confirmed  # type: ignore[attr-defined]

    def pick(self, indices: list[int]) -> list[str]:
        chosen = dict.fromkeys(self.issued[i % len(self.issued)] for i in indices)
        return list(chosen)

    # ----------------------------------------------------------------- rules

    @rule(key=st.sampled_from(["", "a", "b"]), sizes=st.lists(st.integers(1, 8), max_size=3))
    def publish(self, key: str, sizes: list[int]) -> None:
        if not sizes:
            return
        ids = self.broker.publishing.publish(
            TOPIC, [NewMessage(b"x" * size, ordering_key=key) for size in sizes]
        )
        self.evict()  # the quota was checked before the new messages were stored
        for message_id, size in zip(ids, sizes, strict=True):
            seq = len(self.messages)
            msg = Msg(message_id, seq, key if self.ordering else "")
            msg.published, msg.size = self.now(), size + len(key)
            self.messages[message_id] = msg
            self.sizes[message_id] = size + len(key)
            if msg.key:
                self.keys.setdefault(msg.key, []).append(msg)

    @rule(max_messages=st.integers(1, 5))
    def pull(self, max_messages: int) -> None:
        deliveries = self.broker.leasing.pull(SUB, max_messages)
        assert len(deliveries) <= max_messages
        self.expire()
        self.delivered(deliveries, self.ack_deadline, None)
        self.check_streams()

    @rule(
        max_messages=st.integers(-1, 3),
        max_bytes=st.sampled_from([0, 5, 12]),
        deadline=st.sampled_from([10, 20]),
    )
    def open_stream(self, max_messages: int, max_bytes: int, deadline: int) -> None:
        if len(self.streams) >= 3:
            return
        stream_id = self.broker.leasing.open_stream(
            SUB,
            stream_ack_deadline=deadline,
            max_outstanding_messages=max_messages,
            max_outstanding_bytes=max_bytes,
        )
        self.streams[stream_id] = Stream(max_messages, max_bytes, deadline)

    @precondition(lambda self: bool(self.streams))
    @rule(which=st.integers(0, 10), max_messages=st.integers(1, 5))
    def stream_pull(self, which: int, max_messages: int) -> None:
        stream_id = sorted(self.streams)[which % len(self.streams)]
        deliveries = self.broker.leasing.stream_pull(stream_id, max_messages)
        assert len(deliveries) <= max_messages
        self.expire()
        self.delivered(deliveries, self.streams[stream_id].deadline, stream_id)
        self.check_streams()

    @precondition(lambda self: bool(self.streams))
    @rule(which=st.integers(0, 10))
    def close_stream(self, which: int) -> None:
        stream_id = sorted(self.streams)[which % len(self.streams)]
        self.broker.leasing.close_stream(stream_id)
        del self.streams[stream_id]
        for msg in self.messages.values():
            if msg.stream == stream_id:
                msg.stream = None  # still leased, no longer counted by any stream

    @precondition(lambda self: bool(self.issued))
    @rule(indices=st.lists(st.integers(0, 1000), min_size=1, max_size=4))
    def ack(self, indices: list[int]) -> None:
        ack_ids = self.pick(indices)
        reply = self.broker.acks.acknowledge(SUB, ack_ids)
        self.expire()
        self.check_reply(ack_ids, reply, self.apply_ack(ack_ids))
        self.check_streams()

    @precondition(lambda self: bool(self.issued))
    @rule(
        indices=st.lists(st.integers(0, 1000), min_size=1, max_size=4),
        seconds=st.sampled_from([0, 0, 10, 30]),
    )
    def modack(self, indices: list[int], seconds: int) -> None:
        ack_ids = self.pick(indices)
        reply = self.broker.acks.modify_ack_deadline(SUB, ack_ids, seconds)
        self.expire()
        self.check_reply(ack_ids, reply, self.apply_modack(ack_ids, seconds))
        self.check_streams()

    @rule(indices=st.lists(st.integers(0, 1000), max_size=2), nack=st.booleans())
    def malformed_ack(self, indices: list[int], nack: bool) -> None:
        ack_ids = [*(self.pick(indices) if self.issued else []), "not-an-ack-id"]
        call = (
            (lambda: self.broker.acks.modify_ack_deadline(SUB, ack_ids, 0))
            if nack
            else (lambda: self.broker.acks.acknowledge(SUB, ack_ids))
        )
        if not self.exactly_once:
            with pytest.raises(InvalidArgument):
                call()
            return  # the whole request was rejected: nothing applied
        reply = call()
        self.expire()
        expected = self.apply_modack(ack_ids, 0) if nack else self.apply_ack(ack_ids)
        self.check_reply(ack_ids, reply, expected)

    @precondition(lambda self: bool(self.messages))
    @rule(indices=st.lists(st.integers(0, 1000), min_size=1, max_size=3), unknown=st.booleans())
    def skip(self, indices: list[int], unknown: bool) -> None:
        ids = list(self.messages)
        chosen = list(dict.fromkeys(ids[i % len(ids)] for i in indices))
        if unknown:
            chosen.append("999999")
        outcomes = self.broker.publishing.skip(SUB, chosen)
        self.expire()
        expected: dict[str, SkipOutcome] = {}
        for message_id in chosen:
            msg = self.messages.get(message_id)
            if msg is None:
                expected[message_id] = SkipOutcome.NOT_FOUND
            elif msg.state == ACKED:
                expected[message_id] = SkipOutcome.ALREADY_ACKNOWLEDGED
            else:
                self.release(msg, ACKED)
                self.skipped += 1
                expected[message_id] = SkipOutcome.SKIPPED
        assert outcomes == expected
        self.check_streams()

    @rule(seconds=st.sampled_from([0.5, 1.0, 5.0, 10.0, 30.0]), tick=st.booleans())
    def advance(self, seconds: float, tick: bool) -> None:
        self.clock.advance(seconds)
        self.expire()
        if tick:
            self.broker.tick()
            self.check_streams()

    @rule()
    def drain(self) -> None:
        """After every lease and backoff is over, everything unacked is delivered and acked."""
        self.clock.advance(1300)  # > longest lease (30 s) + longest backoff (600 s)
        self.expire()
        while deliveries := self.broker.leasing.pull(SUB, 1000):
            self.delivered(deliveries, self.ack_deadline, None)
            ack_ids = [d.ack_id for d in deliveries]
            reply = self.broker.acks.acknowledge(SUB, ack_ids)
            self.check_reply(ack_ids, reply, self.apply_ack(ack_ids))
        assert self.broker.backlog(SUB) == 0
        assert all(m.state == ACKED for m in self.messages.values())

    # ------------------------------------------------------------ invariants

    @invariant()
    def stream_counts_never_negative(self) -> None:
        if not hasattr(self, "broker"):
            return
        delivery = self.broker._resources.subscriptions[SUB].delivery
        for stream_id in self.streams:
            flow = delivery.streams.get(stream_id)
            assert flow is not None
            assert flow.outstanding_messages >= 0
            assert flow.outstanding_bytes >= 0

    @invariant()
    def every_message_is_acked_outstanding_or_waiting(self) -> None:
        if not hasattr(self, "broker"):
            return
        acked = sum(1 for m in self.messages.values() if m.state == ACKED)
        assert self.broker.backlog(SUB) + acked == len(self.messages)
        counters = self.broker.counters(SUB)
        assert counters["dead_lettered"] == self.dead_lettered
        assert counters["expired_by_ttl"] == self.expired_by_ttl
        assert counters["evicted"] == self.evicted
        assert counters["skipped"] == self.skipped


class SqliteBrokerMachine(BrokerMachine):
    """The same properties with the durable store and a window of 3 messages, so most of
    the backlog is cold (read back from SQLite as the window drains)."""

    def new_store(self) -> Store | None:
        self._directory = tempfile.TemporaryDirectory()
        self._store = SqliteStore(self._directory.name, window=3, gc_interval=0)
        return self._store

    def teardown(self) -> None:
        if hasattr(self, "_store"):
            self._store.close()
            self._directory.cleanup()


for machine in (BrokerMachine, SqliteBrokerMachine):
    machine.TestCase.settings = settings(
        max_examples=100,
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
test_broker_core_properties = BrokerMachine.TestCase
test_broker_core_properties_on_sqlite = SqliteBrokerMachine.TestCase
