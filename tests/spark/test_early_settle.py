"""Early settles (``eoclient.spark._settle.EarlySettles``) without Spark: a worker settles the
parts its tasks emitted as soon as the driver marks their batch committed, before the next
batch's tasks; the task dealt such a part finds it settled; a part whose settle lock another
process holds is left to it; without the mark in time, the dealt task settles as before.
Every message is emitted and acked once, and no ack id fails (nothing goes pending).

``Scene`` and its fixture are test_source_driver's; the read tasks run one after another
in this process, as one worker's.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")
pytest.importorskip("pyspark", reason="the spark extra is not installed")

from eoclient.spark import _settle
from eoclient.spark._runner import Runner

from . import test_source_driver
from .test_read_ahead import _exactly_once as _read_exactly_once
from .test_source_driver import Scene

scene = test_source_driver.scene  # the fixture, shared


async def _settled_within(scene: Scene, batch: int, seconds: float) -> bool:
    """Whether every part of ``batch`` is marked settled within ``seconds``."""
    for _ in range(round(seconds / 0.02)):
        indexes = scene.journal.part_indexes(batch)
        if indexes and all(scene.journal.settled_path(batch, i).exists() for i in indexes):
            return True
        await asyncio.sleep(0.02)
    return False


async def _drain(scene: Scene, runner: Runner, batch: int, max_rows: int) -> list[str]:
    rows: list[str] = []
    while (end := await scene.latest(runner, batch, max_rows)) != batch:
        rows += await scene.read_batch(runner, batch)
        batch = end
    return rows


async def _batch_0_read(scene: Scene) -> tuple[list[str], Runner, list[str]]:
    """3,000 published, batch 0 planned (a probe of 2,000, one task of 500) and read, not
    committed: what was published, the runner, batch 0's rows."""
    published = scene.publish(3000)
    runner = await scene.runner(numPartitions="1")
    assert await scene.latest(runner, 0, 2500) == 1
    return published, runner, await scene.read_batch(runner, 0)


def _exactly_once(scene: Scene, rows: list[str], published: list[str]) -> None:
    _read_exactly_once(scene, rows, published)
    assert scene.journal.pending_files() == []  # no part acked twice


async def test_the_worker_settles_its_part_once_the_driver_marks_the_batch_committed(
    scene: Scene,
) -> None:
    published, runner, rows = await _batch_0_read(scene)
    assert not await _settled_within(scene, 0, 0.3)  # not committed: nothing acked
    assert all(scene.successful_acks(m) == 0 for m in rows)

    assert await scene.latest(runner, 1, 2500) == 2  # batch 0 is committed: marked
    assert scene.journal.committed_path(0).exists()
    assert await _settled_within(scene, 0, 10.0)  # before any task of batch 1 ran
    assert all(scene.successful_acks(m) == 1 for m in rows)

    rows += await scene.read_batch(runner, 1)  # its settle of batch 0 finds it done
    rows += await _drain(scene, runner, 2, 2500)
    _exactly_once(scene, rows, published)


async def test_a_part_another_process_is_settling_is_left_to_it(scene: Scene) -> None:
    published, runner, rows = await _batch_0_read(scene)
    indexes = scene.journal.part_indexes(0)
    with scene.journal.settle_lock(0, indexes[-1], wait=True) as held:
        assert held
        assert await scene.latest(runner, 1, 2500) == 2
        await asyncio.sleep(0.5)  # the worker saw the mark, and the lock taken
        assert not scene.journal.settled_path(0, indexes[-1]).exists()
    # The lock is free again: batch 1's task settles that part (the dealt one, as before).
    rows += await scene.read_batch(runner, 1)
    assert scene.journal.settled_path(0, indexes[-1]).exists()
    rows += await _drain(scene, runner, 2, 2500)
    _exactly_once(scene, rows, published)


async def test_without_the_mark_in_time_the_dealt_task_settles(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_settle, "COMMIT_WATCH_SECONDS", 0.0)  # the worker stops looking
    published, runner, rows = await _batch_0_read(scene)
    assert await scene.latest(runner, 1, 2500) == 2
    assert not await _settled_within(scene, 0, 0.3)
    rows += await scene.read_batch(runner, 1)
    assert await _settled_within(scene, 0, 0.1)
    rows += await _drain(scene, runner, 2, 2500)
    _exactly_once(scene, rows, published)
