"""The source without Spark: the driver's runner and the read tasks against the reference server.

``Runner`` is what Spark's source-runner process holds (a loop thread and the SDK clients);
``read_part`` is what a read task runs on an executor. Here both run in this process against
the reference server in-process, whose history shows every delivery, ack and modack. Only
pyarrow is needed, so these run in seconds where the Spark tests take minutes. Runner calls
block on the runner's own loop and read tasks run their own (``asyncio.run``), so the test's
loop (which serves the reference server) hands both to threads.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.spark._journal import Journal
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._options import SourceSettings
from eoclient.spark._reader import close_workers, read_part
from eoclient.spark._runner import Runner

T = TypeVar("T")
_names = itertools.count(1)


class Scene:
    """A topic and an exactly-once subscription on ``srv``, and runners on one journal."""

    def __init__(self, srv: ReferenceServer, journal: Path, ack_deadline: int = 10) -> None:
        n = next(_names)
        self.srv = srv
        self.topic = f"projects/spark-driver/topics/t-{n}"
        self.subscription = f"projects/spark-driver/subscriptions/s-{n}"
        self.path = journal
        self.journal = Journal(journal)
        self.runners: list[Runner] = []
        srv.broker.topics.create(TopicConfig(self.topic))
        srv.broker.subscriptions.create(
            SubscriptionConfig(
                self.subscription,
                self.topic,
                ack_deadline_seconds=ack_deadline,
                enable_exactly_once_delivery=True,
            )
        )

    def publish(self, count: int) -> list[str]:
        ids: list[str] = []
        for start in range(0, count, 1000):
            ids += self.srv.broker.publishing.publish(
                self.topic,
                [
                    NewMessage(data=f"e-{i}".encode())
                    for i in range(start, min(count, start + 1000))
                ],
            )
        return ids

    def settings(self, **options: str) -> SourceSettings:
        return SourceSettings(
            {
                "subscription": self.subscription,
                "journalpath": str(self.path),
                "endpoint": self.srv.address,
                **{key.lower(): value for key, value in options.items()},
            }
        )

    async def runner(self, **options: str) -> Runner:
        runner = await asyncio.to_thread(Runner, self.settings(**options))
        self.runners.append(runner)
        return runner

    async def run(self, runner: Runner, call: Callable[[], Any]) -> Any:
        """Run ``call()`` (a runner coroutine) on the runner's loop, from a thread."""
        return await asyncio.to_thread(lambda: runner.loop.run(call()))

    async def latest(self, runner: Runner, start: int, max_rows: int) -> int:
        end: int = await self.run(runner, lambda: runner.latest(start, max_rows))
        return end

    async def settle(self, runner: Runner, upto: int) -> None:
        await self.run(runner, lambda: runner.settled_upto(upto))

    async def read(self, batch: int, index: int, quota: int, **options: str) -> list[str]:
        """A read task: the message ids of the rows it returns."""
        settings = self.settings(**options)

        def task() -> list[str]:
            ids: list[str] = []
            for rows in read_part(settings, batch, index, quota):
                ids += rows.column("message_id").to_pylist()
            return ids

        return await asyncio.to_thread(task)

    async def read_batch(self, runner: Runner, batch: int) -> list[str]:
        """Every part of ``batch``, as Spark would read it (the read tasks at once)."""
        parts = await self.run(runner, lambda: _async(runner.partitions, batch, batch + 1))
        results = await asyncio.gather(*(self.read(b, i, q) for b, i, q in parts))
        return [m for ids in results for m in ids]

    def kill(self, runner: Runner) -> None:
        """As if its process died: its loop stops mid-flight, nothing is closed or flushed."""
        runner.loop.close()
        self.runners.remove(runner)

    def deliveries(self, message_id: str) -> int:
        return len(self.srv.history(self.subscription, message_id).deliveries)

    def successful_acks(self, message_id: str) -> int:
        return len(self.srv.history(self.subscription, message_id).successful_acks)

    def modacks(self, message_id: str) -> list[int]:
        return [m.seconds for m in self.srv.history(self.subscription, message_id).modacks]

    def backlog(self) -> int:
        return self.srv.broker.backlog(self.subscription)


async def _async(function: Callable[..., T], *args: Any) -> T:
    return function(*args)


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    async with run_server() as srv:
        scene = Scene(srv, tmp_path / "journal")
        try:
            yield scene
        finally:
            for runner in scene.runners:
                await asyncio.to_thread(runner.loop.close)
            # The read tasks' clients of this process (a worker's, kept between tasks).
            await asyncio.to_thread(close_workers)


# ------------------------------------------------------------------ the driver's probe


async def test_a_small_batch_is_the_probe_journaled_with_ack_ids_then_acked(scene: Scene) -> None:
    ids = scene.publish(2500)
    runner = await scene.runner()

    assert await scene.latest(runner, 0, 1500) == 1
    part = scene.journal.read_part(0, 0)
    assert part.emitted == part.table.num_rows == 1500  # never more than max_rows
    assert scene.journal.plan(0).quotas == ()  # max_rows fits the probe: no read task
    first = part.table.to_pylist()[0]
    assert (
        first["ack_id"]
        == scene.srv.history(scene.subscription, first["message_id"]).deliveries[-1].ack_id
    )
    assert first["data"] == f"e-{ids.index(first['message_id'])}".encode()
    assert await scene.read_batch(runner, 0) == part.table.column("message_id").to_pylist()

    await scene.settle(runner, 1)

    assert scene.backlog() == 1000
    assert scene.journal.batches() == []  # pruned once acked
    assert all(scene.successful_acks(m) == 1 for m in part.table.column("message_id").to_pylist())
    assert runner.pending == {}
    assert scene.journal.load_state()["settled"] == 1


async def test_nothing_to_read_returns_the_start_once_the_acks_are_done(scene: Scene) -> None:
    scene.publish(10)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 100) == 1
    # No message left: latestOffset(1) acks batch 0 before it returns (Spark may end an
    # availableNow query right after it), and plans nothing.
    assert await scene.latest(runner, 1, 100) == 1
    assert scene.backlog() == 0
    assert runner.settled == 1
    assert scene.journal.plan(1) is None


# --------------------------------------------------------------------- read tasks


async def test_read_tasks_pull_disjoint_shares_journaled_before_returning(scene: Scene) -> None:
    published = set(scene.publish(10_000))
    runner = await scene.runner(numPartitions="3")

    assert await scene.latest(runner, 0, 8000) == 1
    plan = scene.journal.plan(0)
    assert plan.quotas == (2000, 2000, 2000)  # the probe's 2,000, the rest over 3 tasks
    rows = await scene.read_batch(runner, 0)

    assert len(rows) == len(set(rows)) == 8000
    assert set(rows) <= published
    # Every row came from a journal part, and no puller left a lease log behind.
    journaled = [
        m
        for index in scene.journal.part_indexes(0)
        for m in scene.journal.read_part(0, index).table.column("message_id").to_pylist()
    ]
    assert sorted(journaled) == sorted(rows)
    assert scene.journal.attempt_logs(0) == []
    await scene.settle(runner, 1)
    assert scene.backlog() == 2000
    assert all(scene.deliveries(m) == 1 for m in rows)


async def test_a_journaled_part_is_replayed_not_pulled_again(scene: Scene) -> None:
    scene.publish(5000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1
    first = await scene.read(0, 1, 1000)
    again = await scene.read(0, 1, 1000)  # a task retry, a speculative copy, a re-run
    assert again == first
    assert len(first) == 1000
    assert all(scene.deliveries(m) == 1 for m in first)


async def test_two_attempts_racing_for_a_part_one_wins_the_other_gives_back(
    scene: Scene, tmp_path: Path
) -> None:
    scene.publish(5000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1
    faults = tmp_path / "faults"
    faults.mkdir()
    points = {"faultPoints": "before_claim:1:pause", "faultDir": str(faults)}

    # The first attempt stops just before it journals; a second attempt of the same part
    # pulls, journals and returns meanwhile; then the first goes on.
    slow = asyncio.create_task(scene.read(0, 1, 1000, **points))
    # A file another thread creates: polled.
    while not (faults / "before_claim.paused").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    winner = await scene.read(0, 1, 1000, **points)
    (faults / "before_claim.resume").touch()
    loser = await slow

    assert loser == winner  # the loser replays the winner's journal
    journaled = set(winner)
    lost_race = [
        m
        for m in scene.srv.broker.history.message_ids(scene.subscription)
        if scene.deliveries(m) and m not in journaled and scene.modacks(m) == [0]
    ]
    assert len(lost_race) == 1000  # what the loser had pulled: given back at once
    assert scene.journal.attempt_logs(0) == []


async def test_a_redelivery_of_a_committed_message_is_acked_not_emitted(scene: Scene) -> None:
    scene.publish(3)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 10) == 1
    part = scene.journal.read_part(0, 0).table.to_pylist()
    lost = part[1]["message_id"]
    # The server takes that delivery back (as when a lease runs out): its ack id is dead.
    scene.srv.broker.acks.modify_ack_deadline(scene.subscription, [part[1]["ack_id"]], 0)

    await scene.settle(runner, 1)
    assert list(runner.pending) == [lost]
    assert scene.successful_acks(lost) == 0

    # The redelivery reaches the next probe: acked, and the batch is empty.
    assert await scene.latest(runner, 1, 10) == 1
    assert runner.pending == {}
    assert scene.deliveries(lost) == 2
    assert scene.successful_acks(lost) == 1
    assert scene.backlog() == 0


async def test_a_redelivery_during_the_acks_of_its_batch_is_acked_by_the_probe(
    scene: Scene,
) -> None:
    # Issue 17: a redelivery of a message whose (stale) ack id is being acked arrives in
    # the pull running meanwhile; it must be acked, not dropped until its deadline.
    scene.publish(3)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 10) == 1
    row = scene.journal.read_part(0, 0).table.to_pylist()[1]
    scene.srv.broker.acks.modify_ack_deadline(scene.subscription, [row["ack_id"]], 0)
    client = runner._client()
    acknowledge = client.acknowledge
    probed = threading.Event()

    async def after_the_probe(subscription: str, ack_ids: Any, **kwargs: Any) -> Any:
        ack_ids = list(ack_ids)
        if row["ack_id"] in ack_ids:
            # The batch's ack (of the stale id) goes out only once the probe has the
            # redelivery: the order that lost it when it happened by chance.
            await asyncio.to_thread(probed.wait, 10)
        return await acknowledge(subscription, ack_ids, **kwargs)

    client.acknowledge = after_the_probe  # type: ignore[method-assign]
    pull_part = runner._probe

    async def probe(*args: Any) -> Any:
        result = await pull_part(*args)
        probed.set()
        return result

    runner._probe = probe  # type: ignore[method-assign]

    assert await scene.latest(runner, 1, 10) == 1
    assert runner.pending == {}
    assert scene.deliveries(row["message_id"]) == 2
    assert scene.successful_acks(row["message_id"]) == 1
    assert scene.backlog() == 0


async def test_a_part_journaled_elsewhere_in_the_batch_is_kept_as_ack_only(scene: Scene) -> None:
    scene.publish(3000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 3000) == 1  # probe 2,000; two tasks of 500
    probe = scene.journal.read_part(0, 0).table.to_pylist()
    taken = probe[0]
    # Its lease is lost (the batch ran long): the server redelivers it, to a read task.
    scene.srv.broker.acks.modify_ack_deadline(scene.subscription, [taken["ack_id"]], 0)

    rows = await scene.read_batch(runner, 0)

    assert rows.count(taken["message_id"]) == 1  # emitted once, by the probe's part
    assert scene.deliveries(taken["message_id"]) == 2
    await scene.settle(runner, 1)
    # Acked with the redelivery's ack id, kept in the read task's part.
    assert scene.successful_acks(taken["message_id"]) == 1
    assert runner.pending == {}


async def test_a_slow_read_task_extends_its_leases_before_journaling(
    scene: Scene, tmp_path: Path
) -> None:
    scene.publish(3000)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 3000) == 1  # the probe's 2,000 and a task of 1,000
    # The read task stops after its pull for 6 s: past the point (10 s deadline - 5 s
    # renewal margin) where the driver could still find its journal in time to extend the
    # leases. So it extends them before journaling.
    faults = tmp_path / "faults"
    faults.mkdir()
    reading = asyncio.create_task(
        scene.read(0, 1, 1000, faultPoints="before_claim:1:pause", faultDir=str(faults))
    )
    await asyncio.sleep(6)
    (faults / "before_claim.resume").touch()
    rows = await reading
    assert len(rows) == 1000
    # Extended (by the task, to leaseSeconds) before its part was journaled.
    journaled_at = scene.journal.part_path(0, 1).stat().st_mtime
    for message_id in rows:
        (modack,) = scene.srv.history(scene.subscription, message_id).modacks
        assert modack.seconds == 60
        assert modack.time <= journaled_at


# --------------------------------------------------------------------- availableNow


async def test_available_now_releases_messages_published_after_it_began(scene: Scene) -> None:
    before = scene.publish(4)
    runner = await scene.runner()
    runner.available_now = True
    runner.cutoff_ns = 0  # every message "published after"
    assert await scene.latest(runner, 0, 10) == 0
    for message_id in before:
        assert scene.modacks(message_id) == [0]  # released at once, not held
    runner.cutoff_ns = None
    assert await scene.latest(runner, 0, 10) == 1


# ----------------------------------------------------------------------- restarts


async def test_a_restarted_runner_leases_and_acks_with_the_journaled_ack_ids(
    scene: Scene,
) -> None:
    scene.publish(30)
    crashed = await scene.runner()
    assert await scene.latest(crashed, 0, 30) == 1
    scene.kill(crashed)  # journaled, not yet committed: nothing acked

    restarted = await scene.runner(leaseSeconds="30")
    journaled = scene.journal.message_ids(0)

    # The lease task extends the journaled deliveries (their deadline nears)...
    for _ in range(150):
        if all(30 in scene.modacks(m) for m in journaled):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the restarted runner did not extend the journaled leases in 15 s")
    # ... and once Spark has committed the batch they are acked with them: SUCCESS at once.
    await scene.settle(restarted, 1)
    assert restarted.pending == {}
    assert scene.backlog() == 0
    for message_id in journaled:
        assert scene.deliveries(message_id) == 1
        assert scene.successful_acks(message_id) == 1


async def test_a_restart_gives_back_what_a_dead_puller_held_unjournaled(scene: Scene) -> None:
    scene.publish(20)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 10) == 1  # batch 0: 10 messages, planned
    scene.kill(runner)
    # A read task of batch 0 (of a plan with tasks) died after pulling, before its journal:
    # its lease log lists what it holds.
    held = scene.srv.broker.leasing.pull(scene.subscription, 10)
    log = LeaseLog(scene.journal.attempt_log(0, 1))
    call = log.sent()
    log.answered(call, [m.ack_id for m in held])
    log.close(delete=False)
    started = time.monotonic()

    restarted = await scene.runner(restartGraceSeconds="0")

    assert time.monotonic() - started < 9  # no waiting for their 10 s deadline
    for message in held:
        assert scene.modacks(message.message.message_id) == [0]
    assert scene.journal.attempt_logs(0) == []
    # They are read again at once: the next batch takes them.
    await scene.settle(restarted, 1)
    assert await scene.latest(restarted, 1, 100) == 2
    assert len(scene.journal.message_ids(1)) == 10


async def test_a_pull_in_flight_when_the_driver_died_makes_available_now_wait(
    scene: Scene,
) -> None:
    crashed = await scene.runner()
    assert crashed.log is not None
    crashed.log.sent()  # a Pull call sent, its answer never recorded
    scene.kill(crashed)
    before = time.monotonic()

    restarted = await scene.runner()

    # The call may have leased messages nobody recorded: an availableNow run looks for
    # them until the call's timeout (10 s) + the ack deadline (10 s) + 2 s have passed.
    assert before + 17 < restarted.grace_until < time.monotonic() + 22.5
