"""The CI-sized exactly-once soak: 50,000 messages, four subscriber clients, every stream
dropped each second, transient and permanent ack faults, failing handlers.

The long form (1,000,000 messages) is ``benchmarks/soak.py``; its results are in
``docs/soak.md``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from eoclient.pytest_plugin.server_thread import ServerThread

from ._engine import SoakPlan, run_soak, summary_lines

MESSAGES = int(os.environ.get("EOCLIENT_SOAK_MESSAGES", "50000"))


@pytest.fixture
def server() -> Iterator[ServerThread]:
    with ServerThread() as running:
        yield running


@pytest.mark.timeout(300)
async def test_exactly_once_soak(server: ServerThread) -> None:
    report = await run_soak(server, SoakPlan(messages=MESSAGES))
    print("\n".join(summary_lines(report)))
    assert report.violations == []
    assert report.published == MESSAGES
    # The faults happened, and what they should cause did.
    assert report.stream_drops > 0
    assert report.streams_dropped > 0
    assert report.transient_faults > 0
    assert report.permanent_faults > 0
    assert report.handler_failures > 0
    assert report.permanent_seen > 0
    # Each failed handler's message (nacked) and each permanently failed ack's message
    # (its lease ran out) came back once more; nothing else was redelivered.
    assert report.redeliveries == report.handler_failures + report.permanent_seen
