"""Tier 3: ``eoclient serve --data-dir`` killed with SIGKILL at random moments and
restarted on the same directory, under publishers, exactly-once subscribers and admin
calls; the clients' observations must keep every durability promise (crash_harness.py).

The negative control runs the same scenario with the server answering before it commits
(``EOCLIENT_TEST_ANSWER_BEFORE_COMMIT=1``): the checker must catch the loss.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.processes import free_port

from . import crash_harness

pytestmark = pytest.mark.slow


@pytest.mark.timeout(240)
async def test_killed_twenty_times_the_server_keeps_every_promise(tmp_path: Path) -> None:
    seen = await crash_harness.run(tmp_path, free_port(), messages=4_000, kills=20, seed=20261123)
    assert seen.kills == 20
    # The publisher retries through every outage (its default 600 s deadline).
    assert (len(seen.published), seen.publish_failures) == (4_000, 0)
    assert crash_harness.violations(seen) == []
    # The exactly-once contract's ambiguous outcome (committed, answer lost with the
    # server: OTHER) can only hit acks in flight at a kill — at most the two subscribers'
    # flow-control windows (2 x 500) a kill; measured here: 0-10 a kill.
    assert len(seen.ambiguous()) <= 0.1 * len(seen.published)
    assert len(seen.created) > 20


@pytest.mark.timeout(240)
async def test_twenty_thousand_exactly_once_messages_through_two_kills_end_with_one_success_each(
    tmp_path: Path,
) -> None:
    """Killed while the subscribers are acking (at 30 % and 65 % of the messages acked),
    the server keeps every ack id valid across its restarts: a pre-crash id whose lease
    still runs settles its message, and an ack committed before the kill whose answer
    was lost answers SUCCESS when the subscriber retries it. Every message ends with
    exactly one SUCCESS — none with the contract's ambiguous OTHER — and none is
    delivered after it."""
    seen = await crash_harness.run(
        tmp_path,
        free_port(),
        messages=20_000,
        kills=2,
        seed=25,
        kill_when_settled=(0.3, 0.65),
        create_resources=False,
    )
    assert seen.kills == 2
    assert (len(seen.published), seen.publish_failures) == (20_000, 0)
    assert crash_harness.exactly_once_violations(seen) == []
    assert all(len(seen.successes[m]) == 1 for m in seen.published)


@pytest.mark.timeout(180)
async def test_the_checker_catches_a_server_that_answers_before_committing(
    tmp_path: Path,
) -> None:
    seen = await crash_harness.run(
        tmp_path, free_port(), messages=3_000, kills=6, seed=7, unsafe=True, drain_timeout=15
    )
    found = crash_harness.violations(seen)
    assert found, "a server answering before it commits lost nothing the checker could see"
    assert any("never delivered" in v or "after its ack returned SUCCESS" in v for v in found)
