"""Message: lazy publish time, first settlement wins, waiters independent of each other."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.acker import AckRequest, _resolve
from eoclient.subscriber.message import Message


class _RecordingSink:
    def __init__(self) -> None:
        self.requests: list[AckRequest] = []

    def settle(self, message: Message, operation: str, seconds: int) -> AckRequest:
        request = AckRequest(message.ack_id, operation, seconds)
        self.requests.append(request)
        return request

    def extend(self, message: Message, seconds: int) -> AckRequest:
        return self.settle(message, "modack", seconds)


def _message(sink: _RecordingSink) -> Message:
    return Message(
        data=b"d",
        attributes={},
        message_id="1",
        publish_seconds=1_767_225_600,
        publish_nanos=123_456_789,
        ordering_key="",
        delivery_attempt=0,
        ack_id="a-1-1",
        size=1,
        _sink=sink,
    )


def test_publish_time_is_utc_with_microseconds() -> None:
    message = _message(_RecordingSink())
    assert message.publish_time == datetime.datetime(
        2026, 1, 1, 0, 0, 0, 123_456, tzinfo=datetime.UTC
    )


async def test_first_settlement_wins_and_later_calls_send_nothing() -> None:
    sink = _RecordingSink()
    message = _message(sink)
    message.ack()
    waiting = asyncio.ensure_future(message.nack_with_response())
    await asyncio.sleep(0)
    _resolve(sink.requests[0], AckResult(AcknowledgeStatus.INVALID_ACK_ID))
    assert await waiting is AcknowledgeStatus.INVALID_ACK_ID
    assert len(sink.requests) == 1
    assert message.settled == "ack"


async def test_cancelling_one_waiter_leaves_the_others_their_result() -> None:
    sink = _RecordingSink()
    message = _message(sink)
    first = asyncio.ensure_future(message.ack_with_response())
    second = asyncio.ensure_future(message.ack_with_response())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    _resolve(sink.requests[0], AckResult(AcknowledgeStatus.SUCCESS))
    assert await second is AcknowledgeStatus.SUCCESS
    assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
