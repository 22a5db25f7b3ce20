"""Read-ahead (``eoclient.spark._ahead``) without Spark: a worker pulls the next share after
a full task, its next task adopts it; what is not adopted is given back, by the worker or
by the driver; every message is emitted once.

The read tasks run one after another (one worker, as Spark's one slot per worker), with
``readAhead`` on; ``Scene`` and its fixture are test_source_driver's.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient.spark import _ahead
from eoclient.spark._ahead import HOLD_SECONDS, ReadAhead, claim_stale, split_quota
from eoclient.spark._decisions import CLOCK_SKEW_SECONDS
from eoclient.spark._lease_log import LeaseLog
from eoclient.spark._reader import ReadTask
from eoclient.spark._runner import Runner
from eoclient.spark._wire import Received
from eoclient.spark._worker import workers

from . import test_source_driver
from .test_source_driver import Scene

scene = test_source_driver.scene  # the fixture, shared

AHEAD = {"readAhead": "true"}


async def _held(scene: Scene) -> ReadAhead | None:
    """The worker's read-ahead once its pull is over (``None``: none held)."""
    worker = workers[scene.srv.address]

    async def wait() -> ReadAhead | None:
        held = worker.ahead.held
        if held is not None and held.pulling is not None:
            await asyncio.shield(held.pulling)
        return worker.ahead.held

    return await asyncio.to_thread(worker.loop.run, wait())


def _ids(ahead: ReadAhead) -> list[str]:
    return [m for chunk in ahead.pulled.chunks for m in chunk.message_ids]


async def _read_batch(scene: Scene, runner: Runner, batch: int) -> list[str]:
    rows: list[str] = []
    for task in await scene.tasks(runner, batch):  # one after another: one worker
        rows += await scene.read(task, **AHEAD)
    return rows


async def _drain(scene: Scene, runner: Runner, batch: int, max_rows: int) -> list[str]:
    """Plan and read batches from ``batch`` until the driver says there is nothing left
    (as an availableNow run ends); every row returned."""
    rows: list[str] = []
    while (end := await scene.latest(runner, batch, max_rows)) != batch:
        rows += await _read_batch(scene, runner, batch)
        batch = end
    return rows


async def _first_read_ahead(
    scene: Scene, messages: int
) -> tuple[list[str], Runner, list[str], ReadAhead]:
    """``messages`` published, batch 0 read (the probe's 2,000, one task of 2,000) and the
    read-ahead its worker then holds: what was published, the runner, batch 0's rows and
    the read-ahead."""
    published = scene.publish(messages)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 4000) == 1
    rows = await _read_batch(scene, runner, 0)
    ahead = await _held(scene)
    assert ahead is not None
    return published, runner, rows, ahead


def _exactly_once(scene: Scene, rows: list[str], published: list[str]) -> None:
    counts = Counter(rows)
    assert [m for m, n in counts.items() if n > 1] == []
    assert set(counts) == set(published)
    assert all(scene.successful_acks(m) == 1 for m in published)
    assert scene.backlog() == 0
    assert scene.journal.read_ahead_logs() == []


async def test_a_worker_reads_the_next_share_ahead_and_its_next_task_adopts_it(
    scene: Scene,
) -> None:
    published, runner, rows, ahead = await _first_read_ahead(scene, 9000)
    assert ahead.pulled.admission.delivered == 2000
    held = _ids(ahead)
    assert not set(held) & set(rows)
    assert len(scene.journal.read_ahead_logs()) == 1

    assert await scene.latest(runner, 1, 4000) == 2  # its probe: the 2,000 after them
    rows += await _read_batch(scene, runner, 1)
    # Adopted whole: the part is the read-ahead's answers, nothing else pulled.
    assert scene.journal.read_part(1, 1).table.column("message_id").to_pylist() == held
    assert scene.journal.attempt_logs(1) == []
    assert all(scene.deliveries(m) == 1 for m in rows)

    # The next read-ahead takes the last 1,000: batch 2's probe finds nothing while its log
    # is fresh, so batch 2 has read tasks (which adopt it), not the end of the run.
    rows += await _drain(scene, runner, 2, 4000)
    _exactly_once(scene, rows, published)
    assert all(scene.deliveries(m) == 1 for m in published)


async def test_answers_past_the_adopting_task_s_quota_are_given_back(scene: Scene) -> None:
    published, runner, rows, ahead = await _first_read_ahead(scene, 8000)
    held = _ids(ahead)

    assert await scene.latest(runner, 1, 3500) == 2  # a probe of 2,000, a task of 1,500
    assert [t.quota for t in await scene.tasks(runner, 1)] == [1500]
    rows += await _read_batch(scene, runner, 1)
    assert scene.journal.read_part(1, 1).table.column("message_id").to_pylist() == held[:1500]
    assert all(scene.modacks(m) == [0] for m in held[1500:])

    rows += await _drain(scene, runner, 2, 3500)
    _exactly_once(scene, rows, published)


async def test_a_task_that_pulls_nothing_gives_the_read_ahead_back(scene: Scene) -> None:
    published, runner, rows, ahead = await _first_read_ahead(scene, 7000)
    held = _ids(ahead)

    # A retry of the journaled task replays its part: it cannot adopt, so gives it back.
    again = await scene.read(ReadTask(0, 1, 2000), **AHEAD)
    assert again == rows[2000:]
    assert await _held(scene) is None
    assert all(scene.modacks(m) == [0] for m in held)
    assert scene.journal.read_ahead_logs() == []

    rows += await _drain(scene, runner, 1, 4000)
    _exactly_once(scene, rows, published)


async def test_a_read_ahead_not_adopted_is_given_back_after_the_hold(scene: Scene) -> None:
    *_, ahead = await _first_read_ahead(scene, 5000)
    held = _ids(ahead)

    deadline = time.monotonic() + HOLD_SECONDS + 5
    while scene.journal.read_ahead_logs() and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    assert scene.journal.read_ahead_logs() == []
    assert await _held(scene) is None
    assert all(scene.modacks(m) == [0] for m in held)


async def test_no_read_ahead_while_tasks_come_further_apart_than_the_hold(
    scene: Scene,
) -> None:
    published = scene.publish(24_000)
    runner = await scene.runner(numPartitions="1")
    rows: list[str] = []
    # Two batches each followed by a pause past the hold (a slow trigger): both read-aheads
    # are given back unadopted.
    for batch in (0, 1):
        assert await scene.latest(runner, batch, 4000) == batch + 1
        rows += await _read_batch(scene, runner, batch)
        assert await _held(scene) is not None
        await asyncio.sleep(HOLD_SECONDS + 0.5)
        assert await _held(scene) is None
    assert await scene.latest(runner, 2, 4000) == 3
    rows += await _read_batch(scene, runner, 2)
    assert await _held(scene) is None  # two in a row: none started
    assert await scene.latest(runner, 3, 4000) == 4
    rows += await _read_batch(scene, runner, 3)
    assert await _held(scene) is not None  # two tasks close together again: reads ahead
    rows += await _drain(scene, runner, 4, 4000)
    _exactly_once(scene, rows, published)


async def test_a_task_whose_read_ahead_the_driver_took_pulls_anew(scene: Scene) -> None:
    published, runner, rows, ahead = await _first_read_ahead(scene, 9000)
    held = _ids(ahead)
    # The driver finds its log old (a worker stalled past the hold) and takes it.
    record, fresh = claim_stale(scene.journal, time.time() + HOLD_SECONDS + 10)
    assert not fresh
    assert len(record.answered) == 2000
    assert len(record.paths) == 1

    assert await scene.latest(runner, 1, 4000) == 2
    rows += await _read_batch(scene, runner, 1)
    # The task could not rename the log: it gave its answers back and pulled its share.
    assert all(scene.modacks(m)[:1] == [0] for m in held)
    assert scene.journal.read_part(1, 1).emitted == 2000
    for path in record.paths:
        path.unlink()
    rows += await _drain(scene, runner, 2, 4000)
    _exactly_once(scene, rows, published)


def _dead_read_ahead(scene: Scene, count: int, *, age: float) -> list[str]:
    """A read-ahead log of a worker that died holding ``count`` deliveries, last written
    ``age`` seconds ago; their message ids."""
    held = scene.srv.broker.leasing.pull(scene.subscription, count)
    log = LeaseLog(scene.journal.new_read_ahead_log())
    log.answered(log.sent(), [m.ack_id for m in held])
    log.close(delete=False)
    written = time.time() - age
    os.utime(log.path, (written, written))
    return [m.message.message_id for m in held]


async def test_the_driver_gives_back_a_dead_worker_s_read_ahead(scene: Scene) -> None:
    published = scene.publish(10)
    runner = await scene.runner(numPartitions="2")
    held = _dead_read_ahead(scene, 10, age=HOLD_SECONDS + CLOCK_SKEW_SECONDS + 1)

    assert await scene.latest(runner, 0, 100) == 1
    assert all(scene.modacks(m) == [0] for m in held)
    assert scene.journal.read_ahead_logs() == []
    rows = await _read_batch(scene, runner, 0)  # the probe took them at once
    rows += await _drain(scene, runner, 1, 100)
    _exactly_once(scene, rows, published)


async def test_a_fresh_read_ahead_log_keeps_an_empty_probe_from_ending_the_run(
    scene: Scene,
) -> None:
    published = scene.publish(10)
    runner = await scene.runner(numPartitions="2")
    held = _dead_read_ahead(scene, 10, age=0.0)

    # Nothing to probe, nothing to settle, but a worker may still adopt those: read tasks.
    assert await scene.latest(runner, 0, 100) == 1
    plan = scene.journal.plan(0)
    assert plan is not None
    assert plan.quotas == (50, 50)
    assert not plan.probe
    assert await _read_batch(scene, runner, 0) == []  # another worker holds them
    assert all(scene.modacks(m) == [] for m in held)
    # Once the log is older than the hold bound, the driver gives them back and reads them.
    old = time.time() - HOLD_SECONDS - CLOCK_SKEW_SECONDS - 1
    for path in scene.journal.read_ahead_logs():
        os.utime(path, (old, old))
    rows = await _drain(scene, runner, 1, 100)
    _exactly_once(scene, rows, published)
    assert all(scene.modacks(m) == [0] for m in held)


async def test_a_task_that_died_after_adopting_leaves_the_settle_to_give_back(
    scene: Scene,
) -> None:
    published = scene.publish(7000)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 4000) == 1
    rows = await _read_batch(scene, runner, 0)
    assert await scene.latest(runner, 1, 4000) == 2
    # An attempt of batch 1's task takes the read-ahead, renames its log to its own
    # attempt log and dies there (before it pulls the rest or journals).
    worker = workers[scene.srv.address]
    ahead = await asyncio.to_thread(
        worker.loop.run, worker.ahead.take((str(scene.path), scene.subscription))
    )
    assert ahead is not None
    held = _ids(ahead)
    ahead.log.move(scene.journal.attempt_log(1, 1))
    ahead.log.close(delete=False)
    assert scene.journal.read_ahead_logs() == []
    assert len(scene.journal.attempt_logs(1, 1)) == 1

    rows += await _read_batch(scene, runner, 1)  # the retry pulls its share anew
    assert not set(held) & set(rows)
    # Batch 2 settles batch 1: the dead attempt's log gives its deliveries back.
    rows += await _drain(scene, runner, 2, 4000)
    assert all(scene.modacks(m)[:1] == [0] for m in held)
    _exactly_once(scene, rows, published)


def _received(ids: list[str]) -> Received:
    import pyarrow as pa

    from eoclient.spark._schema import WIRE_SCHEMA

    n = len(ids)
    columns = {f.name: pa.nulls(n, f.type) for f in WIRE_SCHEMA}
    columns["message_id"] = pa.array(ids, pa.string())
    columns["ack_id"] = pa.array([f"a{m}" for m in ids], pa.string())
    rows = pa.RecordBatch.from_pydict(columns, schema=WIRE_SCHEMA)
    return Received(rows, ids, [f"a{m}" for m in ids], [0] * n)


@pytest.mark.parametrize("quota", [0, 1, 2, 3, 4, 5, 6])
def test_split_quota_takes_answers_in_order_up_to_the_quota(quota: int, tmp_path: Path) -> None:
    chunks = [_received(["1", "2"]), _received(["3", "4", "5"])]
    taken, excess = split_quota(chunks, quota)
    taken_ids = [m for chunk in taken for m in chunk.message_ids]
    assert taken_ids == ["1", "2", "3", "4", "5"][:quota]
    assert [m for chunk in taken for m in chunk.rows.column("message_id").to_pylist()] == (
        taken_ids
    )
    assert excess == [f"a{m}" for m in ["1", "2", "3", "4", "5"][quota:]]


async def test_a_read_ahead_waits_until_the_other_tasks_of_its_batch_have_pulled(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Near the end of the backlog: a probe of 2,000 and two tasks of 1,000 leave 500 for
    # the next batch. The first task's read-ahead must not take the second task's share:
    # it pulls nothing until the second has journaled its part, or takes it (one worker
    # running both: its read-ahead is then that task's pull, as any adopted one).
    monkeypatch.setattr(_ahead, "PARTS_WAIT_SECONDS", 60.0)  # whatever this machine's speed
    published = scene.publish(4500)
    runner = await scene.runner(numPartitions="2")
    assert await scene.latest(runner, 0, 4000) == 1
    first, second = await scene.tasks(runner, 0)
    assert (first.quota, second.quota) == (1000, 1000)
    rows = await scene.read(first, **AHEAD)  # its worker now reads ahead, once 0 is pulled
    await asyncio.sleep(0.2)
    assert all(scene.deliveries(m) == 0 for m in published[3000:])
    rows += (own := await scene.read(second, **AHEAD))
    assert len(own) == 1000
    ahead = await _held(scene)
    assert ahead is not None
    assert ahead.pulled.admission.delivered == 500
    rows += await _drain(scene, runner, 1, 4000)
    _exactly_once(scene, rows, published)
