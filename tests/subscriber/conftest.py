"""The subscriber's session tests run on both event loops the SDK supports: asyncio's own and
uvloop (``pip install eoclient[uvloop]``), through pytest-asyncio's loop-factory hook. The
other tests (pure cores, helpers) run on asyncio's loop only: the loop is not theirs to
exercise."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

import pytest
import uvloop

# The modules whose every test also runs on uvloop: the session end to end against the
# reference server (whose gRPC server then runs on uvloop too) and against the fake
# transport, with its cancellation at every await; and the clocks' sleep (uvloop's timers
# fire up to 1 ms early).
BOTH_LOOPS = frozenset(
    {
        "test_batches.py",
        "test_clock.py",
        "test_session_eod.py",
        "test_session_fake_transport.py",
        "test_session_flow.py",
        "test_session_shutdown.py",
        "test_session_stream.py",
    }
)


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    if item.path.name in BOTH_LOOPS:
        return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}
    return {"asyncio": asyncio.new_event_loop}
