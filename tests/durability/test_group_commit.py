"""GroupCommit over SqliteStore: callers wait for the commit that holds their change (an
exactly-once delivery and acknowledgement leave no earlier), a failed commit fails its
waiters only, and a store read while a commit is in flight waits for it instead of
deadlocking."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import sys
import threading
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import pytest

from eoclient._clock import SystemClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.errors import Unavailable
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.group_commit import COMMIT_SWITCH_INTERVAL, GroupCommit
from eoclient.server_stub.services.table import Services
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/group-commit"
SUB = "projects/p1/subscriptions/group-commit"


@pytest.mark.timeout(30)
async def test_reads_interleaved_with_commits_never_deadlock(tmp_path: Path) -> None:
    # A window of one message: every pull reads the store (a refill), so reads land
    # between a commit's start and its thread's start as often as they can.
    store = SqliteStore(tmp_path, window=1, gc_interval=0)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(group.run())  # the commit loop, as the server runs it
        acked = await _serve(broker, group)
    assert sum(acked) == 2_000
    assert group.commits > 10
    store.close()
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened.load().subscriptions[0].backlog == 0  # every ack was committed
    finally:
        reopened.close()


async def _serve(broker: Broker, group: GroupCommit) -> list[int]:
    broker.topics.create(TopicConfig(TOPIC))
    broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    await group.durable()

    async def publisher() -> None:
        for _ in range(200):
            broker.publishing.publish(TOPIC, [NewMessage(b"x")] * 10)
            await group.durable()

    pulled = 0

    async def consumer() -> int:
        nonlocal pulled
        acked = 0
        while pulled < 2_000:
            deliveries = broker.leasing.pull(SUB, 1)
            pulled += len(deliveries)
            if deliveries:
                broker.acks.acknowledge(SUB, [d.ack_id for d in deliveries])
                acked += len(deliveries)
            # Plain acks wait for nothing: this loop stays ready, so its next pull (a
            # store read) can run right after a commit began, before its thread starts.
            await asyncio.sleep(0)
        return acked

    async def ticker() -> None:
        # The server's ticker: garbage collection reads and writes the store.
        while pulled < 2_000:
            broker.tick()
            await asyncio.sleep(0)

    _, _, *acked = await asyncio.gather(publisher(), ticker(), *(consumer() for _ in range(4)))
    await group.durable()
    await group.aclose()  # the loop ends once the commit in flight is done
    return acked


async def test_without_its_loop_a_commit_is_made_at_once(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    broker.topics.create(TopicConfig(TOPIC))
    assert store.dirty
    await group.durable()
    assert not store.dirty
    store.close()


class HeldStore(SqliteStore):
    """A SqliteStore whose commits wait in their thread until the test lets them end, or
    fail once when told to."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.go = threading.Event()
        self.go.set()
        self.entered = threading.Event()  # a commit's thread started
        self.fail_next = False

    def finish_commit(self) -> None:
        self.entered.set()
        assert self.go.wait(10)
        super().finish_commit()
        if self.fail_next:  # after the COMMIT: the store stays usable, GroupCommit sees a failure
            self.fail_next = False
            raise sqlite3.OperationalError("disk I/O error")


@contextlib.asynccontextmanager
async def _commit_loop(group: GroupCommit, store: HeldStore) -> AsyncIterator[None]:
    """``group``'s commit loop running, as the server runs it (commits go to its thread),
    until the block ends: then the held thread let go, the loop stopped, the store closed."""
    runner = asyncio.create_task(group.run())
    await asyncio.sleep(0)
    try:
        yield
    finally:
        store.go.set()
        await group.aclose()
        await runner
        store.close()


@pytest.mark.timeout(30)
async def test_exactly_once_answers_leave_only_once_their_commit_ended(tmp_path: Path) -> None:
    # A delivery (its lease) and an acknowledgement's SUCCESS of an exactly-once
    # subscription: each call's answer waits for the commit that holds its change, the
    # commit's thread held here for as long as the test likes.
    store = HeldStore(tmp_path)
    services = Services(Broker(SystemClock(), store=store, record_history=False))
    group = services.group_commit
    async with _commit_loop(group, store):
        await services.call("CreateTopic", pb.Topic(name=TOPIC))
        await services.call(
            "CreateSubscription",
            pb.Subscription(name=SUB, topic=TOPIC, enable_exactly_once_delivery=True),
        )
        await services.call(
            "Publish", pb.PublishRequest(topic=TOPIC, messages=[pb.PubsubMessage(data=b"x")] * 3)
        )
        request = pb.PullRequest(subscription=SUB, max_messages=3)
        answer = await _answered_after_commit(store, services.call("Pull", request))
        ack_ids = [received.ack_id for received in answer.received_messages]
        assert len(ack_ids) == 3
        acknowledge = pb.AcknowledgeRequest(subscription=SUB, ack_ids=ack_ids)
        await _answered_after_commit(store, services.call("Acknowledge", acknowledge))
    reopened = SqliteStore(tmp_path)
    try:
        assert reopened.load().subscriptions[0].backlog == 0  # the acks were committed
    finally:
        reopened.close()


@pytest.mark.timeout(30)
async def test_a_commit_that_fails_fails_its_waiters_and_the_next_one_commits(
    tmp_path: Path,
) -> None:
    store = HeldStore(tmp_path)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    async with _commit_loop(group, store):
        broker.topics.create(TopicConfig(TOPIC))
        store.fail_next = True
        with pytest.raises(Unavailable, match="could not store the change: disk I/O error"):
            await group.durable()
        broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
        await group.durable()
        assert not store.dirty
        assert group.commits == 1  # the one that did not fail
    reopened = SqliteStore(tmp_path)
    try:
        assert [s.record.config.name for s in reopened.load().subscriptions] == [SUB]
    finally:
        reopened.close()


async def _answered_after_commit(store: HeldStore, call: Coroutine[Any, Any, Any]) -> Any:
    """Run ``call`` with the next commit's thread held: it must not answer until the
    commit is let go."""
    store.go.clear()
    store.entered.clear()
    answer = asyncio.create_task(call)
    await _entered(store)  # its commit took its change and waits
    await asyncio.sleep(0.05)
    assert not answer.done()
    store.go.set()
    return await answer


async def _entered(store: HeldStore) -> None:
    assert await asyncio.to_thread(store.entered.wait, 10)


@pytest.mark.timeout(30)
async def test_a_commit_its_caller_began_is_waited_for_once_and_later_changes_go_next(
    tmp_path: Path,
) -> None:
    # ``start``: the commit begins on the caller's stack and runs while the caller works;
    # the caller's ``durable()`` then waits for that commit (its change is in it), not for
    # another one; a change made meanwhile waits for the next commit.
    store = HeldStore(tmp_path)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    async with _commit_loop(group, store):
        store.go.clear()
        broker.topics.create(TopicConfig(TOPIC))
        group.start()
        assert group.in_flight  # begun at once, before the loop turned
        assert not store.dirty  # the flight took the change
        group.start()  # one in flight already: nothing more
        await _entered(store)
        first = asyncio.create_task(group.durable())
        await asyncio.sleep(0.05)
        assert not first.done()  # its change is in the commit held in its thread
        broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
        second = asyncio.create_task(group.durable())
        store.go.set()
        await first
        await second
        assert group.commits == 2  # the held one, then the one with the subscription
        assert not store.dirty
    reopened = SqliteStore(tmp_path)
    try:
        assert [s.record.config.name for s in reopened.load().subscriptions] == [SUB]
    finally:
        reopened.close()


async def test_start_without_its_loop_leaves_the_commit_to_durable(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    broker = Broker(SystemClock(), store=store, record_history=False)
    group = GroupCommit(store)
    broker.topics.create(TopicConfig(TOPIC))
    group.start()
    assert not group.in_flight
    assert store.dirty
    await group.durable()
    assert not store.dirty
    store.close()


async def test_the_switch_interval_is_short_while_commit_loops_run(tmp_path: Path) -> None:
    # Two servers' loops in one process, ending in the other order than they started:
    # the interval the process had comes back once the last one ends.
    before = sys.getswitchinterval()
    first, second = SqliteStore(tmp_path / "a"), SqliteStore(tmp_path / "b")
    groups = GroupCommit(first), GroupCommit(second)
    try:
        runners = [asyncio.create_task(group.run()) for group in groups]
        await asyncio.sleep(0)
        assert sys.getswitchinterval() == pytest.approx(min(before, COMMIT_SWITCH_INTERVAL))
        await groups[0].aclose()
        await runners[0]
        assert sys.getswitchinterval() == pytest.approx(min(before, COMMIT_SWITCH_INTERVAL))
        await groups[1].aclose()
        await runners[1]
        assert sys.getswitchinterval() == pytest.approx(before)
    finally:
        sys.setswitchinterval(before)
        first.close()
        second.close()


@pytest.mark.timeout(30)
async def test_an_exactly_once_pull_begins_its_commit_before_its_answer_is_encoded(
    tmp_path: Path,
) -> None:
    # The deliveries leave the subscriber service with their leases' commit already in
    # flight (the door encodes them meanwhile); without exactly-once nothing waits for
    # that commit, and none is begun.
    store = HeldStore(tmp_path)
    services = Services(Broker(SystemClock(), store=store, record_history=False))
    group = services.group_commit
    async with _commit_loop(group, store):
        await services.call("CreateTopic", pb.Topic(name=TOPIC))
        for name, exactly_once in ((SUB, True), (SUB + "-plain", False)):
            subscription = pb.Subscription(
                name=name, topic=TOPIC, enable_exactly_once_delivery=exactly_once
            )
            await services.call("CreateSubscription", subscription)
        await services.call(
            "Publish", pb.PublishRequest(topic=TOPIC, messages=[pb.PubsubMessage(data=b"x")] * 3)
        )
        plain = pb.PullRequest(subscription=SUB + "-plain", max_messages=3)
        assert len(await services.subscriber.pull_deliveries(plain)) == 3
        assert not group.in_flight
        request = pb.PullRequest(subscription=SUB, max_messages=3)
        assert len(await services.subscriber.pull_deliveries(request)) == 3
        assert group.in_flight
        assert not store.dirty  # both Pulls' leases are in it
        await group.durable()
