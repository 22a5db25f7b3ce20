"""Message: contents read on demand, first settlement wins, waiters independent of each other."""

from __future__ import annotations

import asyncio
import datetime

import pytest

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_records import Operation, Position
from eoclient.subscriber.ack_results import AcknowledgeStatus
from eoclient.subscriber.ledger import AckLedger, AckMode
from eoclient.subscriber.message import Message, message_from_wire
from eoclient.subscriber.settings import AckRetrySettings
from eoclient.subscriber.waiters import deliver


class _LedgerSink:
    """Settles straight into an exactly-once ledger (no dispatch core, no stream)."""

    def __init__(self) -> None:
        self.ledger = AckLedger(AckRetrySettings(), exactly_once=True)
        self.ledger.mode = AckMode.STREAM

    def settle(self, message: Message, operation: Operation, seconds: int) -> Position:
        return self.ledger.submit(message.ack_id, operation, seconds)

    def extend(self, message: Message, seconds: int) -> Position:
        return self.ledger.submit(message.ack_id, Operation.MODACK, seconds)

    def sent(self) -> list[pubsub_pb2.StreamingPullRequest]:
        return self.ledger.take(0.0, stream_open=True, stopping=False).stream

    def answer(self, response: pubsub_pb2.StreamingPullResponse) -> None:
        resolved, _ = self.ledger.on_confirmation(response)
        deliver(resolved)


def _received() -> pubsub_pb2.ReceivedMessage:
    return pubsub_pb2.ReceivedMessage(
        ack_id="a-1-1",
        delivery_attempt=3,
        message=pubsub_pb2.PubsubMessage(
            data=b"d",
            attributes={"k": "v"},
            message_id="1",
            ordering_key="key",
            publish_time={"seconds": 1_767_225_600, "nanos": 123_456_789},
        ),
    )


def _message(sink: _LedgerSink | None) -> Message:
    return message_from_wire(_received(), sink, 5.0)


def test_contents_as_received() -> None:
    message = _message(None)
    assert message.publish_time == datetime.datetime(
        2026, 1, 1, 0, 0, 0, 123_456, tzinfo=datetime.UTC
    )
    assert (message.data, message.attributes, message.message_id) == (b"d", {"k": "v"}, "1")
    assert (message.ordering_key, message.delivery_attempt, message.ack_id) == ("key", 3, "a-1-1")
    assert message.size == _received().message.ByteSize()
    assert message.received_at == 5.0
    assert "message_id='1'" in repr(message)
    with pytest.raises(RuntimeError, match="not received through eoclient"):
        message.ack()


async def test_first_settlement_wins_and_later_calls_send_nothing() -> None:
    sink = _LedgerSink()
    message = _message(sink)
    message.ack()
    waiting = asyncio.ensure_future(message.nack_with_response())
    await asyncio.sleep(0)
    (request,) = sink.sent()
    assert list(request.ack_ids) == ["a-1-1"]
    assert not request.modify_deadline_ack_ids  # the nack sent nothing
    response = pubsub_pb2.StreamingPullResponse()
    response.acknowledge_confirmation.invalid_ack_ids.append("a-1-1")
    sink.answer(response)
    assert await waiting is AcknowledgeStatus.INVALID_ACK_ID
    assert message.settled == "ack"
    assert message.modify_ack_deadline(30) is None  # settled: nothing to extend
    assert sink.sent() == []


async def test_cancelling_one_waiter_leaves_the_others_their_result() -> None:
    sink = _LedgerSink()
    message = _message(sink)
    first = asyncio.ensure_future(message.ack_with_response())
    second = asyncio.ensure_future(message.ack_with_response())
    await asyncio.sleep(0)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    sink.sent()
    response = pubsub_pb2.StreamingPullResponse()
    response.acknowledge_confirmation.ack_ids.append("a-1-1")
    sink.answer(response)
    assert await second is AcknowledgeStatus.SUCCESS
    assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS


def test_modify_ack_deadline_checks_its_range() -> None:
    message = _message(_LedgerSink())
    with pytest.raises(ValueError, match=r"0\.\.600"):
        message.modify_ack_deadline(601)
    message.modify_ack_deadline(0)  # a nack
    assert message.settled == "nack"


def test_delivery_attempt_is_none_unless_the_server_counts_it() -> None:
    # The server sends 0 without a dead-letter policy: "not counted", as the official
    # client reports it, not a count of zero.
    received = _received()
    received.delivery_attempt = 0
    message = message_from_wire(received, None, 0.0)
    assert message.delivery_attempt is None
    assert "delivery_attempt=None" in repr(message)
