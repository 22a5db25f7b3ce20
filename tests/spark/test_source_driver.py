"""The source without Spark: the driver's runner and the read tasks against the reference server.

``Runner`` is what Spark's source-runner process holds (a loop thread and a channel);
``read_part`` is what a read task runs on an executor (its settles, its part, its lease
keeper). Here both run in this process against the reference server in-process, whose
history shows every delivery, ack and modack. Only pyarrow is needed, so these run in
seconds where the Spark tests take minutes. Runner calls block on the runner's own loop and
read tasks on their worker's, so the test's loop (which serves the reference server) hands
both to threads. Spark's part is played by the test: ``latest(k)`` only once batch ``k - 1``
was read in full (as Spark asks for batch ``k`` only after committing ``k - 1``).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient._clock import FakeClock, SystemClock
from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.spark import _reader, _settle
from eoclient.spark._decisions import Admission, Known
from eoclient.spark._journal import Journal, Plan
from eoclient.spark._lease_log import LeaseLog, read_logs
from eoclient.spark._options import SourceSettings
from eoclient.spark._pull import Pulled, open_client, pull_part
from eoclient.spark._reader import ReadTask, close_workers, read_part
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
        self.killed: list[Runner] = []
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
        """The source's settings; read-ahead off unless asked (``readAhead="true"``): the
        tests of the other steps count every pull, and all read tasks of this process share
        one worker, which Spark's would not (tests/spark/test_read_ahead.py has its own)."""
        return SourceSettings(
            {
                "subscription": self.subscription,
                "journalpath": str(self.path),
                "endpoint": self.srv.address,
                "readahead": "false",
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

    async def read(self, task: ReadTask, **options: str) -> list[str]:
        """A read task: the message ids of the rows it returns."""
        settings = self.settings(**options)

        def run() -> list[str]:
            ids: list[str] = []
            for rows in read_part(settings, task):
                ids += rows.column("message_id").to_pylist()
            return ids

        return await asyncio.to_thread(run)

    async def tasks(self, runner: Runner, batch: int) -> list[ReadTask]:
        tasks: list[ReadTask] = await self.run(
            runner, lambda: _async(runner.partitions, batch, batch + 1)
        )
        return tasks

    async def read_batch(self, runner: Runner, batch: int) -> list[str]:
        """Every task of ``batch``, as Spark would run them (at once)."""
        tasks = await self.tasks(runner, batch)
        results = await asyncio.gather(*(self.read(task) for task in tasks))
        return [m for ids in results for m in ids]

    async def commit_all(self, runner: Runner, batch: int, max_rows: int) -> int:
        """Read ``batch`` and plan the next ones (settle batches included) until there is
        nothing left to read or settle: as an availableNow run; the first batch left."""
        while True:
            await self.read_batch(runner, batch)
            end = await self.latest(runner, batch + 1, max_rows)
            if end == batch + 1:
                return end
            batch += 1

    def journaled(self, batch: int) -> list[str]:
        return [m for part in self.journal.message_ids(batch) for m in part.ids.to_pylist()]

    def pending(self) -> list[str]:
        return sorted(m for file in self.journal.pending_ids() for m in file.ids.to_pylist())

    def kill(self, runner: Runner) -> None:
        """As if its process died: its loop stops mid-flight, nothing is flushed (the
        kernel closes its files). What it left pending is cancelled only at the end of the
        test (``close_killed``), after everything the test checks."""
        runner.loop.halt()
        if runner.log is not None:
            runner.log.close(delete=False)
        self.runners.remove(runner)
        self.killed.append(runner)

    def close_killed(self) -> list[asyncio.Task[Any]]:
        """Finish the killed runners' loops; the tasks still pending on them (none)."""
        for runner in self.killed:
            runner.loop.close()
        return [task for r in self.killed for task in asyncio.all_tasks(r.loop.loop)]

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
def dealt_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers do not settle their parts early (``_settle.EarlySettles``): the tasks the
    driver deals the parts to settle them, as when a batch's commit mark comes too late."""
    monkeypatch.setattr(_settle, "COMMIT_WATCH_SECONDS", 0.0)


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    async with run_server() as srv:
        scene = Scene(srv, tmp_path / "journal")
        try:
            yield scene
        finally:
            for runner in scene.runners:
                await asyncio.to_thread(runner.loop.run, runner.close())
                await asyncio.to_thread(runner.loop.close)
            # The read tasks' clients of this process (a worker's, kept between tasks).
            await asyncio.to_thread(close_workers)
            # A killed runner's keeper, left pending, would be reported as destroyed
            # whenever the runner is collected (in a later test, or at exit).
            assert await asyncio.to_thread(scene.close_killed) == []


# ------------------------------------------------------------------ the driver's probe


async def test_a_small_batch_is_the_probe_journaled_with_ack_ids(scene: Scene) -> None:
    ids = scene.publish(2500)
    runner = await scene.runner()

    assert await scene.latest(runner, 0, 1500) == 1
    part = scene.journal.read_part(0, 0)
    assert part.emitted == part.table.num_rows == 1500  # never more than max_rows
    plan = scene.journal.plan(0)
    assert (plan.quotas, plan.probe, plan.settles) == ((), True, ())  # no read task
    first = part.table.to_pylist()[0]
    assert (
        first["ack_id"]
        == scene.srv.history(scene.subscription, first["message_id"]).deliveries[-1].ack_id
    )
    assert first["data"] == f"e-{ids.index(first['message_id'])}".encode()
    assert await scene.read_batch(runner, 0) == part.table.column("message_id").to_pylist()


@pytest.mark.usefixtures("dealt_settles")
async def test_the_next_batch_s_tasks_ack_a_committed_batch_not_the_driver(scene: Scene) -> None:
    scene.publish(2500)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 1500) == 1
    first = await scene.read_batch(runner, 0)

    # Spark committed batch 0 and asks for batch 1: the driver plans it, acking nothing.
    assert await scene.latest(runner, 1, 1500) == 2
    assert scene.journal.plan(1).settles == (0,)
    assert all(scene.successful_acks(m) == 0 for m in first)
    (task,) = await scene.tasks(runner, 1)
    assert task == ReadTask(1, 0, 0, ((0, 0),))  # the probe's part; and batch 0's to ack
    second = await scene.read_batch(runner, 1)

    assert all(scene.successful_acks(m) == 1 for m in first)
    assert scene.journal.settled_path(0, 0).exists()
    assert scene.pending() == []
    # Spark committed batch 1: batch 0 is settled, pruned.
    assert await scene.latest(runner, 2, 1500) == 3  # nothing new: batch 2 only settles
    assert scene.journal.batches() == [1, 2]
    assert scene.journal.load_state()["settled"] == 1
    assert runner.settled == 1
    assert len(second) == 1000
    assert await scene.commit_all(runner, 2, 1500) == 3
    assert scene.backlog() == 0
    assert scene.journal.batches() == []


async def test_nothing_left_a_batch_of_settle_tasks_then_the_start(scene: Scene) -> None:
    scene.publish(10)
    runner = await scene.runner(numPartitions="3")
    assert await scene.latest(runner, 0, 100) == 1
    await scene.read_batch(runner, 0)
    # No message left, but batch 0 waits for its acks: batch 1 only settles (one task: one
    # part to ack), returning no row. Spark may end an availableNow query after it.
    assert await scene.latest(runner, 1, 100) == 2
    plan = scene.journal.plan(1)
    assert (plan.quotas, plan.probe, plan.settles) == ((), False, (0,))
    assert await scene.tasks(runner, 1) == [ReadTask(1, None, 0, ((0, 0),))]
    assert await scene.read_batch(runner, 1) == []
    assert scene.backlog() == 0
    # Nothing to read or settle: the start, and everything pruned.
    assert await scene.latest(runner, 2, 100) == 2
    assert runner.settled == 2
    assert scene.journal.batches() == []
    assert scene.journal.plan(2) is None


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
    assert sorted(scene.journaled(0)) == sorted(rows)
    assert scene.journal.attempt_logs(0) == []
    # Batch 1 (the last 2,000 are its probe's; its tasks will find nothing more): batch
    # 0's four parts are dealt to its four tasks.
    assert await scene.latest(runner, 1, 8000) == 2
    tasks = await scene.tasks(runner, 1)
    # No task of its own for the probe's part: the first pulling task replays it.
    assert [(t.part, t.quota, t.with_probe) for t in tasks] == [
        (1, 2000, True),
        (2, 2000, False),
        (3, 2000, False),
    ]
    assert [t.settle for t in tasks] == [((0, 0), (0, 3)), ((0, 1),), ((0, 2),)]
    await scene.read_batch(runner, 1)
    assert all(scene.successful_acks(m) == 1 for m in rows)
    assert all(scene.deliveries(m) == 1 for m in rows)


async def test_a_journaled_part_is_replayed_not_pulled_again(scene: Scene) -> None:
    scene.publish(5000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1
    first = await scene.read(ReadTask(0, 1, 1000))
    again = await scene.read(ReadTask(0, 1, 1000))  # a task retry, a speculative copy, a re-run
    assert again == first
    assert len(first) == 1000
    assert all(scene.deliveries(m) == 1 for m in first)


async def test_the_first_pulling_task_replays_the_probe_s_part_before_its_own(
    scene: Scene,
) -> None:
    scene.publish(5000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1  # the probe's 2,000, two tasks of 1,000
    tasks = await scene.tasks(runner, 0)
    assert tasks == [ReadTask(0, 1, 1000, (), True), ReadTask(0, 2, 1000)]
    probe = scene.journal.read_part(0, 0).table.column("message_id").to_pylist()

    first = await scene.read(tasks[0])
    again = await scene.read(tasks[0])  # a retry replays both parts

    assert first[:2000] == probe
    assert first[2000:] == scene.journal.read_part(0, 1).table.column("message_id").to_pylist()
    assert again == first
    assert all(scene.deliveries(m) == 1 for m in first)


async def test_a_task_whose_probe_part_is_missing_fails_before_pulling(scene: Scene) -> None:
    scene.publish(5000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1
    task = (await scene.tasks(runner, 0))[0]
    scene.journal.part_path(0, 0).unlink()

    with pytest.raises(RuntimeError, match="has no"):
        await scene.read(task)
    assert not scene.journal.part_path(0, 1).exists()
    assert scene.journal.attempt_logs(0) == []  # no pull began


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
    slow = asyncio.create_task(scene.read(ReadTask(0, 1, 1000), **points))
    # A file another thread creates: polled.
    while not (faults / "before_claim.paused").exists():  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    winner = await scene.read(ReadTask(0, 1, 1000), **points)
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


async def test_a_redelivery_of_a_committed_message_to_the_probe_is_acked(scene: Scene) -> None:
    scene.publish(3)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 10) == 1
    await scene.read_batch(runner, 0)
    part = scene.journal.read_part(0, 0).table.to_pylist()
    lost = part[1]["message_id"]
    # The server takes that delivery back (as when a lease runs out): its ack id is dead.
    scene.srv.broker.acks.modify_ack_deadline(scene.subscription, [part[1]["ack_id"]], 0)

    # Batch 0 is committed: its redelivery reaches the probe, which acks it; nothing new.
    assert await scene.latest(runner, 1, 10) == 2
    assert scene.deliveries(lost) == 2
    assert scene.successful_acks(lost) == 1
    assert scene.journal.part_indexes(1) == []
    # The settle task's ack of the dead id fails: the message is remembered as pending.
    await scene.read_batch(runner, 1)
    assert scene.pending() == [lost]
    assert await scene.latest(runner, 2, 10) == 2
    assert scene.backlog() == 0


@pytest.mark.usefixtures("dealt_settles")
async def test_a_redelivery_of_a_committed_message_to_a_read_task_is_acked(scene: Scene) -> None:
    scene.publish(6000)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 2000) == 1  # the probe's 2,000 alone
    first = await scene.read_batch(runner, 0)
    assert await scene.latest(runner, 1, 4000) == 2  # a probe of 2,000 and a task of 2,000
    row = scene.journal.read_part(0, 0).table.to_pylist()[7]
    # Its lease runs out after batch 0 was committed: the read task of batch 1 gets it.
    scene.srv.broker.acks.modify_ack_deadline(scene.subscription, [row["ack_id"]], 0)

    second = await scene.read_batch(runner, 1)

    assert row["message_id"] in first
    assert row["message_id"] not in second
    assert scene.deliveries(row["message_id"]) == 2
    assert scene.successful_acks(row["message_id"]) == 1  # by the read task, at once
    assert scene.pending() == [row["message_id"]]  # the settle's ack of the dead id failed
    assert len(second) == 3999


async def test_a_message_delivered_twice_in_one_pull_leaves_room_for_another(
    scene: Scene,
) -> None:
    """A read task's chunks of new messages are confirmed once its calls are answered: a
    message that came twice counted twice until then, so the pull goes on for the message
    it still lacks (here: none left, an empty answer ends it)."""
    scene.publish(5)
    srv, subscription = scene.srv, scene.subscription

    class ReleasingLog(LeaseLog):
        released = False

        def answered(self, call: int, ack_ids: Sequence[str]) -> None:
            super().answered(call, ack_ids)
            if ack_ids and not self.released:  # given back: the next Pull redelivers it
                self.released = True
                srv.broker.acks.modify_ack_deadline(subscription, [ack_ids[0]], 0)

    clock = SystemClock()
    client = open_client(srv.address, clock)
    pulled = Pulled(Admission(Known()))
    log = ReleasingLog(scene.path.parent / "pull.log")
    try:
        await pull_part(
            client, subscription, pulled, log, max_rows=6, deadline=clock.now() + 30, clock=clock
        )
    finally:
        log.close(delete=True)
        await client.aclose()
    admission = pulled.admission
    assert (admission.delivered, len(admission.emitted), len(admission.superseded)) == (6, 5, 1)
    # 5 (all there were), the redelivery (1: room for 6), then one more for the 6th.
    assert [len(chunk) for chunk in pulled.chunks] == [5, 1, 0]
    assert pulled.rows().num_rows == 5


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
    # The task that withdrew it emitted 499: one message is left for batch 1; 2 settles it.
    assert await scene.commit_all(runner, 0, 3000) == 3
    # Acked with the redelivery's ack id, kept in the read task's part.
    assert scene.successful_acks(taken["message_id"]) == 1
    assert scene.backlog() == 0


async def test_a_slow_read_task_extends_its_leases_before_journaling(
    scene: Scene, tmp_path: Path
) -> None:
    scene.publish(3000)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 3000) == 1  # the probe's 2,000 and a task of 1,000
    # The read task stops after its pull for 6 s: past the point (10 s deadline - 5 s
    # renewal margin) where its keeper could still extend the leases in time. So it extends
    # them before journaling.
    faults = tmp_path / "faults"
    faults.mkdir()
    reading = asyncio.create_task(
        scene.read(ReadTask(0, 1, 1000), faultPoints="before_claim:1:pause", faultDir=str(faults))
    )
    await asyncio.sleep(6)
    (faults / "before_claim.resume").touch()
    rows = await reading
    assert len(rows) == 1000
    # Extended (by the task, to leaseSeconds) before its part was journaled.
    journaled_at = scene.journal.part_path(0, 1).stat().st_mtime
    for message_id in rows:
        modack = scene.srv.history(scene.subscription, message_id).modacks[0]
        assert modack.seconds == 60
        assert modack.time <= journaled_at


async def test_a_keeper_extends_an_emitted_part_until_it_is_settled(scene: Scene) -> None:
    scene.publish(30)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 30) == 1
    emitted = await scene.read_batch(runner, 0)

    # The task is over; its worker's keeper extends the part's leases (their 10 s deadline
    # nears: due 4.5 s before it) while Spark writes the batch and plans the next.
    for _ in range(150):
        if all(60 in scene.modacks(m) for m in emitted):  # leaseSeconds
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the keeper did not extend the emitted part's leases in 15 s")
    assert await scene.commit_all(runner, 0, 30) == 2
    for message_id in emitted:
        assert scene.deliveries(message_id) == 1
        assert scene.successful_acks(message_id) == 1
    # Settled: the keeper lets the part go.
    keeper = next(iter(_reader_workers()))
    for _ in range(50):
        if len(keeper) == 0:
            break
        await asyncio.sleep(0.1)
    assert len(keeper) == 0


async def test_a_settle_that_ran_is_not_repeated_by_a_retry(scene: Scene) -> None:
    scene.publish(20)
    runner = await scene.runner()
    assert await scene.latest(runner, 0, 20) == 1
    emitted = await scene.read_batch(runner, 0)
    assert await scene.latest(runner, 1, 20) == 2
    (task,) = await scene.tasks(runner, 1)
    await scene.read(task)
    await scene.read(task)  # Spark retries it (or re-runs batch 1 after a restart)
    assert all(scene.successful_acks(m) == 1 for m in emitted)
    assert all(len(scene.srv.history(scene.subscription, m).acks) == 1 for m in emitted)
    assert scene.pending() == []


async def test_a_settle_gives_back_what_a_dead_read_task_held(scene: Scene) -> None:
    scene.publish(2030)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 3000) == 1  # a probe of 2,000, two tasks of 500
    # An attempt of part 1 died after pulling, before its journal: its lease log lists
    # what it holds.
    held = scene.srv.broker.leasing.pull(scene.subscription, 10)
    log = LeaseLog(scene.journal.attempt_log(0, 1))
    call = log.sent()
    log.answered(call, [m.ack_id for m in held])
    log.close(delete=False)
    assert len(await scene.read_batch(runner, 0)) == 2020  # the retry pulls the rest

    # Nothing left to pull: batch 1 settles batch 0, giving the dead attempt's back.
    assert await scene.latest(runner, 1, 3000) == 2
    assert scene.journal.plan(1).settles == (0,)
    await scene.read_batch(runner, 1)
    for message in held:
        assert scene.modacks(message.message.message_id) == [0]
    assert scene.journal.attempt_logs(0) == []
    # Read again at once: the next batch takes them.
    assert await scene.latest(runner, 2, 3000) == 3
    assert len(scene.journaled(2)) == 10


@pytest.mark.usefixtures("dealt_settles")
async def test_a_read_task_pulls_while_its_settle_acks(scene: Scene, tmp_path: Path) -> None:
    scene.publish(6000)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 3000) == 1  # a probe of 2,000, two tasks of 500
    first = await scene.read_batch(runner, 0)
    assert await scene.latest(runner, 1, 3000) == 2
    task = (await scene.tasks(runner, 1))[1]  # the task without the probe's part
    assert (task.part, task.quota, task.settle, task.with_probe) == (2, 500, ((0, 1),), False)
    faults = tmp_path / "faults"
    faults.mkdir()
    points = {"faultPoints": "after_settle:1:pause", "faultDir": str(faults)}

    # Held once its part of batch 0 is acked, before it is marked settled: its pull, sent
    # with the acks, goes on meanwhile (journaled only once the settle is done).
    reading = asyncio.create_task(scene.read(task, **points))
    try:
        while not (faults / "after_settle.paused").exists():  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        old = set(first)
        deadline = time.monotonic() + 10
        while True:
            pulled = [
                m
                for m in scene.srv.broker.history.message_ids(scene.subscription)
                if m not in old and scene.deliveries(m)
            ]
            if len(pulled) >= 2000 + 500 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert len(pulled) == 2000 + 500  # batch 1's probe and this task's share
        assert scene.journal.part_indexes(1) == [0]
    finally:
        (faults / "after_settle.resume").touch()
        rows = await reading

    assert len(rows) == 500
    assert scene.journal.settled_path(0, 1).exists()
    assert sorted(scene.journaled(1)) == sorted(pulled)


def test_a_read_task_s_pull_deadline_runs_from_the_end_of_its_settles(tmp_path: Path) -> None:
    clock = FakeClock(start=1000.0)
    settings = SourceSettings(
        {
            "subscription": "projects/p/subscriptions/sub",
            "journalpath": str(tmp_path),
            "pulltimeoutseconds": "2",
        }
    )
    worker = _reader._Worker(loop=None, client=None, clock=clock)  # type: ignore[arg-type]
    plan = Plan((500,), True, (0,), None, 10.0)
    pulling = _reader._Pulling(settings, worker, Journal(tmp_path), ReadTask(1, 1, 500), plan)

    assert pulling.deadline() == 1002.0
    clock.advance(30)  # the settles' acks take long: the pull goes on
    assert pulling.deadline() == 1032.0
    pulling.settled()
    clock.advance(1.5)
    assert pulling.deadline() == 1032.0


@pytest.mark.usefixtures("dealt_settles")
async def test_a_settle_failing_while_its_task_pulls_leaves_the_pull_to_be_given_back(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    scene.publish(6500)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 3000) == 1
    await scene.read_batch(runner, 0)
    assert await scene.latest(runner, 1, 3000) == 2
    task = (await scene.tasks(runner, 1))[1]  # part 2 (no probe's part), settles (0, 1)
    assert (task.part, task.settle, task.with_probe) == (2, ((0, 1),), False)

    async def broken(*args: Any) -> None:
        raise OSError("the journal's disk is gone")

    monkeypatch.setattr(_reader, "acknowledge_part", broken)
    with pytest.raises(OSError, match="disk is gone"):
        await scene.read(task)
    monkeypatch.undo()
    # The attempt's pull ran to its end and its lease log lists what it holds; nothing of
    # it was journaled, and its settle is to be done again.
    (log,) = scene.journal.attempt_logs(1, 2)
    held = read_logs([log]).answered
    assert len(held) == 500
    assert scene.journal.part_indexes(1) == [0]
    assert not scene.journal.settled_path(0, 1).exists()

    retried = await scene.read(task)  # Spark's retry: settles, pulls other messages
    assert len(retried) == 500
    assert scene.journal.settled_path(0, 1).exists()
    # Batch 2 settles batch 1: what the failed attempt held is given back.
    await scene.read_batch(runner, 1)
    assert await scene.latest(runner, 2, 3000) == 3
    await scene.read_batch(runner, 2)
    given_back = [
        m
        for m in scene.srv.broker.history.message_ids(scene.subscription)
        if scene.modacks(m) == [0]
    ]
    assert len(given_back) == 500
    assert not set(given_back) & set(retried)


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


async def test_a_restarted_driver_replans_nothing_and_its_tasks_ack_the_journal(
    scene: Scene,
) -> None:
    scene.publish(30)
    crashed = await scene.runner()
    assert await scene.latest(crashed, 0, 30) == 1
    scene.kill(crashed)  # journaled, not yet committed: nothing acked

    restarted = await scene.runner()
    # Spark re-runs batch 0 (its offset log has it): the same part, replayed.
    journaled = scene.journaled(0)
    assert sorted(await scene.read_batch(restarted, 0)) == sorted(journaled)
    assert await scene.commit_all(restarted, 0, 30) == 2
    assert scene.backlog() == 0
    for message_id in journaled:
        assert scene.deliveries(message_id) == 1
        assert scene.successful_acks(message_id) == 1


async def test_a_restart_gives_back_what_the_dead_driver_s_probe_held(scene: Scene) -> None:
    scene.publish(20)
    crashed = await scene.runner()
    assert crashed.log is not None
    # The probe pulled, and the driver died before journaling: its log lists what it held.
    held = scene.srv.broker.leasing.pull(scene.subscription, 10)
    call = crashed.log.sent()
    crashed.log.answered(call, [m.ack_id for m in held])
    scene.kill(crashed)
    started = time.monotonic()

    restarted = await scene.runner(restartGraceSeconds="0")

    assert time.monotonic() - started < 9  # no waiting for their 10 s deadline
    for message in held:
        assert scene.modacks(message.message.message_id) == [0]
    assert crashed.log.path not in scene.journal.driver_logs()
    assert await scene.latest(restarted, 0, 100) == 1
    assert len(scene.journaled(0)) == 20


@pytest.mark.parametrize("puller", ["the driver's probe", "a read task"])
async def test_a_pull_in_flight_when_a_puller_died_makes_available_now_wait(
    scene: Scene, puller: str
) -> None:
    crashed = await scene.runner()
    assert crashed.log is not None
    if puller == "a read task":
        scene.publish(3)
        assert await scene.latest(crashed, 0, 10) == 1
        log = LeaseLog(scene.journal.attempt_log(0, 1))
        log.sent()  # a Pull call sent, its answer never recorded
        log.close(delete=False)
    else:
        crashed.log.sent()
    scene.kill(crashed)
    before = time.time()  # the runner's clock: wall-clock time

    restarted = await scene.runner()

    # The call may have leased messages nobody recorded: an availableNow run looks for
    # them until the call's timeout (10 s) + the ack deadline (10 s) + 2 s have passed.
    assert before + 17 < restarted.grace_until < time.time() + 22.5


async def test_a_journal_of_the_version_whose_driver_acked_goes_on(scene: Scene) -> None:
    scene.journal.create()
    scene.journal.save_state({"settled": 0, "pending": {"m-old": time.time()}})
    runner = await scene.runner()
    assert scene.journal.load_state() == {"settled": 0}
    assert scene.pending() == ["m-old"]
    assert runner.settled == 0


def _reader_workers() -> list[Any]:
    from eoclient.spark._reader import _workers

    return [keeper for worker in _workers.values() for keeper in worker.keepers.values()]
