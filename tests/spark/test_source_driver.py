"""The source's driver side without Spark: pulling, journaling, settling and restarts.

``_Driver`` is what the source runner process holds (it owns a loop thread and the SDK
client); here it runs against the reference server in-process, whose history shows every
delivery, ack and modack. Only pyarrow is needed, so these run in seconds where the Spark
tests take minutes. Driver calls block on the driver's own loop, so the test's loop (which
serves the reference server) hands them to a thread.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.spark._journal import read_table
from eoclient.spark._options import SourceSettings
from eoclient.spark.source import _Driver

T = TypeVar("T")
_names = itertools.count(1)


class Scene:
    """A topic and an exactly-once subscription on ``srv``, and drivers on one journal."""

    def __init__(self, srv: ReferenceServer, journal: Path) -> None:
        n = next(_names)
        self.srv = srv
        self.topic = f"projects/spark-driver/topics/t-{n}"
        self.subscription = f"projects/spark-driver/subscriptions/s-{n}"
        self.journal = journal
        self.drivers: list[_Driver] = []
        srv.broker.create_topic(TopicConfig(self.topic))
        srv.broker.create_subscription(
            SubscriptionConfig(
                self.subscription,
                self.topic,
                ack_deadline_seconds=10,
                enable_exactly_once_delivery=True,
            )
        )

    def publish(self, count: int) -> list[str]:
        ids: list[str] = []
        for start in range(0, count, 1000):
            ids += self.srv.broker.publish(
                self.topic,
                [
                    NewMessage(data=f"e-{i}".encode())
                    for i in range(start, min(count, start + 1000))
                ],
            )
        return ids

    async def driver(self, **options: str) -> _Driver:
        settings = SourceSettings(
            {
                "subscription": self.subscription,
                "journalpath": str(self.journal),
                "endpoint": self.srv.address,
                **{key.lower(): value for key, value in options.items()},
            }
        )
        driver = await asyncio.to_thread(_Driver, settings)
        self.drivers.append(driver)
        return driver

    async def run(self, driver: _Driver, call: Callable[[], Any]) -> Any:
        """Run ``call()`` (a driver coroutine) on the driver's loop, from a thread."""
        return await asyncio.to_thread(lambda: driver.loop.run(call()))

    def kill(self, driver: _Driver) -> None:
        """As if its process died: its loop stops mid-flight, nothing is closed or flushed."""
        driver.loop.close()
        self.drivers.remove(driver)

    def journaled_ids(self) -> list[str]:
        ids: list[str] = []
        for path in sorted(self.journal.glob("batch-*.arrow")):
            ids += read_table(str(path)).column("message_id").to_pylist()
        return ids

    def deliveries(self, message_id: str) -> int:
        return len(self.srv.history(self.subscription, message_id).deliveries)

    def successful_acks(self, message_id: str) -> int:
        return len(self.srv.history(self.subscription, message_id).successful_acks)


@pytest.fixture
async def scene(tmp_path: Path) -> AsyncIterator[Scene]:
    async with run_server() as srv:
        scene = Scene(srv, tmp_path / "journal")
        try:
            yield scene
        finally:
            for driver in scene.drivers:
                await asyncio.to_thread(driver.loop.close)


def _only(values: Iterator[T] | list[T]) -> T:
    (value,) = list(values)
    return value


async def test_a_batch_is_journaled_with_ack_ids_then_acked_once_committed(scene: Scene) -> None:
    ids = scene.publish(2500)
    driver = await scene.driver()

    end = await scene.run(driver, lambda: driver.pull_batch(0, 1500))

    assert end == 1500  # never more than max_rows, though 2,500 were there
    journal = read_table(str(_only(scene.journal.glob("batch-*.arrow"))))
    assert journal.column("seq").to_pylist() == list(range(1500))
    first = journal.to_pylist()[0]
    history = scene.srv.history(scene.subscription, first["message_id"])
    assert first["ack_id"] == history.deliveries[-1].ack_id
    assert first["data"] == f"e-{ids.index(first['message_id'])}".encode()

    await scene.run(driver, lambda: driver.settle(1500))

    assert scene.srv.broker.backlog(scene.subscription) == 1000
    assert not list(scene.journal.glob("batch-*.arrow"))  # pruned once acked
    journaled = set(journal.column("message_id").to_pylist())
    assert all(scene.successful_acks(m) == 1 for m in journaled)
    assert driver.pending == {}


async def test_messages_arriving_while_two_pulls_wait_are_all_taken(scene: Scene) -> None:
    # 2,000 rows make two calls of 1,000 in flight. Both wait on the empty subscription;
    # the publish wakes both: one gets the messages, the other comes back empty, in either
    # order. Nothing may be dropped (or left leased in a cancelled call).
    driver = await scene.driver(pullTimeoutSeconds="5")
    start = 0
    for _ in range(6):
        pulling = asyncio.create_task(
            scene.run(driver, lambda start=start: driver.pull_batch(start, 2000))
        )
        await asyncio.sleep(0.2)
        scene.publish(5)
        end = await pulling
        assert end - start == 5
        start = end


async def test_a_restarted_driver_leases_and_acks_with_the_journaled_ack_ids(
    scene: Scene,
) -> None:
    scene.publish(30)
    crashed = await scene.driver()
    end = await scene.run(crashed, lambda: crashed.pull_batch(0, 30))
    assert end == 30
    scene.kill(crashed)  # journaled, not yet committed: nothing acked

    restarted = await scene.driver(leaseSeconds="30")
    journaled = scene.journaled_ids()
    assert sorted(restarted.ack_id_of) == sorted(journaled)

    # The lease task extends the journaled deliveries at its first tick...
    def extended(message_id: str) -> bool:
        modacks = scene.srv.history(scene.subscription, message_id).modacks
        return any(m.seconds == 30 and not m.failure for m in modacks)

    for _ in range(100):
        if all(extended(m) for m in journaled):
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("the restarted driver did not extend the journaled leases within 10 s")
    # ... and once Spark has committed the batch they are acked with them: SUCCESS at once,
    # no waiting for a redelivery.
    await scene.run(restarted, lambda: restarted.settle(30))
    assert restarted.pending == {}
    assert scene.srv.broker.backlog(scene.subscription) == 0
    for message_id in journaled:
        assert scene.deliveries(message_id) == 1
        assert scene.successful_acks(message_id) == 1


async def test_an_unconfirmed_ack_is_pending_and_its_redelivery_acked_not_emitted(
    scene: Scene,
) -> None:
    scene.publish(3)
    driver = await scene.driver()
    assert await scene.run(driver, lambda: driver.pull_batch(0, 10)) == 3
    lost = scene.journaled_ids()[1]
    # The server releases that delivery (as when a lease runs out): its ack id is dead.
    scene.srv.broker.modify_ack_deadline(scene.subscription, [driver.ack_id_of[lost]], 0)

    await scene.run(driver, lambda: driver.settle(3))
    assert list(driver.pending) == [lost]
    assert scene.successful_acks(lost) == 0

    # The redelivery is acked and not journaled again: the batch is empty.
    assert await scene.run(driver, lambda: driver.pull_batch(3, 10)) == 3
    assert driver.pending == {}
    assert scene.deliveries(lost) == 2
    assert scene.successful_acks(lost) == 1
    assert scene.srv.broker.backlog(scene.subscription) == 0


async def test_available_now_releases_messages_published_after_it_began(scene: Scene) -> None:
    before = scene.publish(4)
    driver = await scene.driver()
    # As prepareForTriggerAvailableNow sets it, with every message "published after".
    driver.available_now = True
    driver.cutoff = 0
    assert await scene.run(driver, lambda: driver.pull_batch(0, 10)) == 0
    assert driver.seq_of == {}
    # Released at once (modack 0), not held until their deadline.
    for message_id in before:
        modacks = scene.srv.history(scene.subscription, message_id).modacks
        assert [m.seconds for m in modacks] == [0]
    driver.cutoff = None
    assert await scene.run(driver, lambda: driver.pull_batch(0, 10)) == 4


async def test_the_committed_batch_is_acked_while_the_next_is_pulled(scene: Scene) -> None:
    scene.publish(3000)
    driver = await scene.driver()
    assert await scene.run(driver, lambda: driver.pull_batch(0, 1500)) == 1500
    first = set(scene.journaled_ids())

    # latestOffset(1500): batch [0, 1500) is committed; the next one is pulled meanwhile.
    assert await scene.run(driver, lambda: driver.settle_and_pull(1500, 1500)) == 3000

    second = set(scene.journaled_ids())
    assert first.isdisjoint(second)
    assert len(second) == 1500
    assert all(scene.successful_acks(m) == 1 for m in first)
    assert not any(scene.successful_acks(m) for m in second)
    assert sorted(driver.seq_of.values()) == list(range(1500, 3000))


async def test_after_a_clean_run_a_new_one_does_not_wait_for_redeliveries(scene: Scene) -> None:
    scene.publish(10)
    first = await scene.driver()
    assert await scene.run(first, lambda: first.pull_batch(0, 100)) == 10
    await scene.run(first, lambda: first.settle(10))
    scene.kill(first)

    second = await scene.driver()
    assert second.grace_until <= time.monotonic()


async def test_after_a_run_died_mid_pull_a_new_one_waits_for_its_leases(scene: Scene) -> None:
    # The subscription is empty: the pull waits (the reference server holds an empty Pull
    # for a second) and the driver dies meanwhile.
    crashed = await scene.driver(pullTimeoutSeconds="5")
    # Not awaited: its loop stops under it, so it never completes (as in a killed process).
    asyncio.run_coroutine_threadsafe(crashed.pull_batch(0, 100), crashed.loop.loop)
    for _ in range(100):
        if crashed.pulling_since is not None:
            break
        await asyncio.sleep(0.01)
    assert crashed.pulling_since is not None
    scene.kill(crashed)
    before = time.monotonic()

    restarted = await scene.driver(pullTimeoutSeconds="5")
    # That pull's start + pullTimeoutSeconds (5) + the ack deadline (10) + 2 s margin.
    assert before + 14 < restarted.grace_until < time.monotonic() + 17.5

    # A run that dies during the wait hands it on, though it pulled (and saved state) since.
    assert await scene.run(restarted, lambda: restarted.pull_batch(0, 100)) == 0
    scene.kill(restarted)
    third = await scene.driver(pullTimeoutSeconds="5")
    assert before + 14 < third.grace_until < time.monotonic() + 17.5


async def _pulled_ahead(scene: Scene, driver: _Driver) -> set[str]:
    """Wait for the driver's pull ahead to finish; the message ids it holds."""
    ahead = driver._ahead
    assert ahead is not None, "the driver is not pulling ahead"
    await scene.run(driver, lambda: asyncio.wait({ahead.task}))
    return set(ahead.pulled.batch)


async def test_after_a_full_quick_batch_the_next_is_pulled_while_spark_runs_it(
    scene: Scene,
) -> None:
    scene.publish(3500)
    driver = await scene.driver()
    assert await scene.run(driver, lambda: driver.settle_and_pull(0, 1000)) == 1000
    assert driver._ahead is None  # how long Spark takes over a batch is not known yet
    assert await scene.run(driver, lambda: driver.settle_and_pull(1000, 1000)) == 2000

    ahead = await _pulled_ahead(scene, driver)
    assert len(ahead) == 1000
    assert ahead.isdisjoint(scene.journaled_ids())  # leased, not journaled

    # The next latestOffset journals exactly those, delivered once.
    assert await scene.run(driver, lambda: driver.settle_and_pull(2000, 1000)) == 3000
    assert set(scene.journaled_ids()) == ahead  # batches before 2000 are acked and pruned
    assert all(scene.deliveries(m) == 1 for m in ahead)
    # The last 500 make a batch that is not full: nothing more is pulled ahead.
    assert await scene.run(driver, lambda: driver.settle_and_pull(3000, 1000)) == 3500
    assert driver._ahead is None


async def test_no_pulling_ahead_when_spark_takes_long_over_a_batch(scene: Scene) -> None:
    scene.publish(3000)
    driver = await scene.driver()
    assert await scene.run(driver, lambda: driver.settle_and_pull(0, 1000)) == 1000
    assert driver._returned_at is not None
    # As if Spark had spent a whole ack deadline on the batch: pulled-ahead messages would
    # lose their leases before being journaled.
    driver._returned_at -= driver.ack_deadline
    assert await scene.run(driver, lambda: driver.settle_and_pull(1000, 1000)) == 2000
    assert driver._ahead is None


async def _pulling_ahead(scene: Scene, **options: str) -> tuple[_Driver, set[str]]:
    """A driver that has journaled two full batches of 1,000 and pulled the next ahead."""
    scene.publish(3000)
    driver = await scene.driver(**options)
    await scene.run(driver, lambda: driver.settle_and_pull(0, 1000))
    await scene.run(driver, lambda: driver.settle_and_pull(1000, 1000))
    return driver, await _pulled_ahead(scene, driver)


async def test_a_crash_while_pulled_ahead_makes_the_next_run_wait_for_those_leases(
    scene: Scene,
) -> None:
    crashed, _ = await _pulling_ahead(scene)
    before = time.monotonic()
    scene.kill(crashed)

    restarted = await scene.driver()
    # The pull ahead's start + pullTimeoutSeconds (2) + the ack deadline (10) + 2 s margin.
    assert before + 10 < restarted.grace_until < time.monotonic() + 14.5


async def test_a_stopping_source_gives_back_what_it_pulled_ahead(scene: Scene) -> None:
    driver, ahead = await _pulling_ahead(scene)

    await scene.run(driver, driver.release_pulled_ahead)

    for message_id in ahead:
        modacks = scene.srv.history(scene.subscription, message_id).modacks
        assert [m.seconds for m in modacks] == [0]
    # Back at once, not after their deadline.
    assert await scene.run(driver, lambda: driver.pull_batch(2000, 1000)) == 3000
    assert set(scene.journaled_ids()) >= ahead


async def test_pulled_ahead_beyond_a_smaller_limit_is_given_back(scene: Scene) -> None:
    driver, ahead = await _pulling_ahead(scene)

    assert await scene.run(driver, lambda: driver.settle_and_pull(2000, 400)) == 2400
    journaled = set(scene.journaled_ids())
    assert len(journaled) == 400
    assert journaled <= ahead  # released, then pulled again
    assert all(scene.deliveries(m) == 2 for m in journaled)


async def test_a_redelivery_arriving_while_its_stale_ack_is_sent_is_acked(scene: Scene) -> None:
    # A journaled delivery whose ack id went stale (its lease ran out): the server
    # redelivers it while settle_and_pull acks the stale id and pulls at once.
    scene.publish(3)
    driver = await scene.driver()
    assert await scene.run(driver, lambda: driver.pull_batch(0, 10)) == 3
    lost = scene.journaled_ids()[1]
    stale = driver.ack_id_of[lost]
    scene.srv.broker.modify_ack_deadline(scene.subscription, [stale], 0)

    # The first ack call goes out only once the pull has admitted the redelivery: the
    # order that loses it when it happens by chance.
    client = driver._client()
    acknowledge = client.acknowledge

    async def after_the_redelivery(*args: Any, **kwargs: Any) -> Any:
        client.acknowledge = acknowledge  # type: ignore[method-assign]
        # The driver's own state, which no event announces: polled.
        while driver.ack_id_of.get(lost) == stale:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        return await acknowledge(*args, **kwargs)

    client.acknowledge = after_the_redelivery  # type: ignore[method-assign]

    assert await scene.run(driver, lambda: driver.settle_and_pull(3, 10)) == 3

    # The redelivery was acked in the same settle: nothing pending, nothing left leased.
    assert driver.pending == {}
    assert scene.deliveries(lost) == 2
    assert scene.successful_acks(lost) == 1
    assert scene.srv.broker.backlog(scene.subscription) == 0
