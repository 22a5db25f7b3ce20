"""Every broker-core test runs twice: on ``MemoryStore`` and on ``SqliteStore``.

On SQLite the window is 3 messages, so nearly every backlog is mostly cold (in the store,
read back as the window drains) and the window/cold seam is exercised by every scenario.
After each SQLite run the test's brokers are restarted from their data directories and
must come back with the same resources, the same backlogs (window + cold = rows stored),
the same retained messages and snapshots: a generic durability check of every scenario.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eoclient.server_stub.core import Broker
from eoclient.server_stub.storage.sqlite import SqliteStore

from . import support

TEST_WINDOW = 3
# Modules whose tests build no Env (their own broker, or none at all).
STORE_INDEPENDENT = {
    "test_batch_paths",
    "test_complexity",
    "test_lease_table",
    "test_refill",
    "test_rooms",
    "test_window",
}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every test function here (not the Hypothesis state machine, a unittest TestCase
    # that runs its SQLite variant itself) runs with each store.
    if metafunc.module.__name__.rsplit(".", 1)[-1] in STORE_INDEPENDENT:
        return
    if "store_kind" not in metafunc.fixturenames:
        metafunc.fixturenames.append("store_kind")
    metafunc.parametrize("store_kind", ["memory", "sqlite"], indirect=True)


@pytest.fixture
def store_kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    kind: str = request.param
    counter = iter(range(1_000_000))
    if kind == "sqlite":
        support.STORE_FACTORY = lambda: SqliteStore(
            tmp_path / f"store-{next(counter)}", window=TEST_WINDOW, gc_interval=0
        )
    support.CREATED.clear()
    try:
        yield kind
        if kind == "sqlite":
            for env in support.CREATED:
                _check_restart(env)
    finally:
        for env in support.CREATED:
            if env.store is not None:
                env.store.close()
        support.CREATED.clear()
        support.STORE_FACTORY = None


def _state(broker: Broker) -> dict[str, Any]:
    """What must survive a restart, read without advancing time."""
    resources = broker._resources
    return {
        "topics": {name: topic.config for name, topic in resources.topics.items()},
        "subscriptions": {
            name: (
                s.config,
                s.created,
                s.last_activity,
                s.delivery.reads.backlog(),
                s.delivery.reads.retained(),
            )
            for name, s in resources.subscriptions.items()
        },
        "snapshots": {
            name: (record, broker.store.snapshots.messages(name))
            for name, record in broker.snapshots.records.items()
        },
        "last_seq": broker.publishing.last_seq,
    }


def _check_restart(env: support.Env) -> None:
    store = env.store
    assert isinstance(store, SqliteStore)
    before = _state(env.broker)
    store.close()
    reopened = SqliteStore(store.directory, window=TEST_WINDOW, gc_interval=0)
    try:
        after = _state(Broker(env.clock, store=reopened))
    finally:
        reopened.close()
    assert after == before
