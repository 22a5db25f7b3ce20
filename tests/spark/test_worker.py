"""A read task's Python worker between tasks (``eoclient.spark._worker``): what it keeps out
of the full collection PySpark's daemon runs after every task."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from eoclient.spark._worker import SurvivorFreeze


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the test process collects as before


def test_each_task_starts_by_freezing_what_is_alive_and_every_nth_unfreezes(
    unfrozen: None,
) -> None:
    freeze = SurvivorFreeze(enabled=True, renewal=3)
    freeze.task_started()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    made_by_the_task = [[] for _ in range(100)]
    freeze.task_started()
    assert gc.get_freeze_count() >= frozen + len(made_by_the_task)
    freeze.task_started()  # the third: the next collection walks everything again
    assert gc.get_freeze_count() == 0
    freeze.task_started()
    assert gc.get_freeze_count() > 0


def test_a_cycle_frozen_alive_is_collected_once_the_freeze_is_renewed(unfrozen: None) -> None:
    freeze = SurvivorFreeze(enabled=True, renewal=2)
    first, second = _Node(), _Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    freeze.task_started()  # the cycle is alive: frozen
    del first, second
    gc.collect()
    assert gone() is not None  # dead, but frozen: not collected
    freeze.task_started()  # the second task: unfrozen
    gc.collect()  # the daemon's collection after it
    assert gone() is None


def test_without_worker_reuse_nothing_is_frozen(unfrozen: None) -> None:
    SurvivorFreeze(enabled=False).task_started()
    assert gc.get_freeze_count() == 0
