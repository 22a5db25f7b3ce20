"""The publisher's sender over its pipeline, on a fake transport whose ``Publish`` answers
when the test says so: orders of events a real server cannot be made to produce."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any, cast

import pytest

from eoclient._clock import MonotonicClock
from eoclient._transport import PubSubTransport
from eoclient.errors import ClosedError
from eoclient.publisher.pipeline import Pipeline
from eoclient.publisher.sender import Sender
from eoclient.publisher.settings import (
    BatchSettings,
    CallOptions,
    PublishFlowControl,
    PublishRetrySettings,
)

TOPIC = "projects/p1/topics/sender"
ONE_ATTEMPT = CallOptions(retry=None, timeout=None)

pytestmark = pytest.mark.timeout(10)


class HeldPublish:
    """A transport whose every ``Publish`` waits for the test to answer it."""

    def __init__(self) -> None:
        self.calls: list[asyncio.Future[list[str]]] = []
        self.called = asyncio.Event()

    def publish(
        self, topic: str, messages: Sequence[Any], timeout: float | None = None
    ) -> asyncio.Future[list[str]]:
        answer: asyncio.Future[list[str]] = asyncio.get_running_loop().create_future()
        self.calls.append(answer)
        self.called.set()
        return answer


def sender_over(pipeline: Pipeline, wake: asyncio.Event) -> Sender:
    return Sender(
        pipeline,
        wake=wake,
        clock=MonotonicClock(),
        retry=PublishRetrySettings(),
        rng=random.Random(0),
        spans=None,
    )


async def test_a_batch_whose_send_task_never_ran_fails_when_the_sender_stops() -> None:
    # A key's second batch is released by the first one's answer, and its send task is
    # created; the sender stops before that task's first step, so the task never runs
    # its body. Its message must still fail, not wait forever.
    wake, drained = asyncio.Event(), asyncio.Event()
    pipeline = Pipeline(
        BatchSettings(max_messages=1),
        PublishFlowControl(),
        clock=MonotonicClock(),
        spans=None,
        notify_sender=wake.set,
        notify_drained=drained.set,
    )
    sender = sender_over(pipeline, wake)
    transport = HeldPublish()
    await sender.start(cast(PubSubTransport, transport))
    first = pipeline.accept(TOPIC, "key", b"first", {}, ONE_ATTEMPT)
    second = pipeline.accept(TOPIC, "key", b"second", {}, ONE_ATTEMPT)
    await transport.called.wait()
    transport.calls[0].set_result(["id-1"])
    # The first send task resumes before this one does: it finishes its batch and
    # creates the send task of the second, which would run after this one.
    await asyncio.sleep(0)
    assert len(transport.calls) == 1
    await sender.stop()
    assert first.result() == "id-1"
    with pytest.raises(ClosedError, match="closed before the message was sent"):
        second.result()
    assert len(transport.calls) == 1
    assert (pipeline.published, pipeline.failed) == (1, 1)
    assert pipeline.flow_statistics().outstanding_messages == 0


async def test_stopping_fails_a_batch_in_flight_and_what_is_still_batched() -> None:
    wake, drained = asyncio.Event(), asyncio.Event()
    pipeline = Pipeline(
        BatchSettings(max_messages=1),
        PublishFlowControl(),
        clock=MonotonicClock(),
        spans=None,
        notify_sender=wake.set,
        notify_drained=drained.set,
    )
    sender = sender_over(pipeline, wake)
    transport = HeldPublish()
    await sender.start(cast(PubSubTransport, transport))
    in_flight = pipeline.accept(TOPIC, "key", b"in flight", {}, ONE_ATTEMPT)
    queued = pipeline.accept(TOPIC, "key", b"queued behind it", {}, ONE_ATTEMPT)
    await transport.called.wait()
    await sender.stop()
    with pytest.raises(ClosedError, match="closed before the server answered"):
        in_flight.result()
    with pytest.raises(ClosedError, match="closed before the message was sent"):
        queued.result()
    assert pipeline.failed == 2
    assert pipeline.flow_statistics().outstanding_messages == 0
