"""Results reach their waiters (``subscriber/waiters.py``): per position as soon as known,
whole-record waiters and ``on_resolved`` once all are, each once."""

from __future__ import annotations

import asyncio

from eoclient._proto import pubsub_pb2
from eoclient.subscriber.ack_records import AckRecord, Operation
from eoclient.subscriber.ack_results import AcknowledgeStatus
from eoclient.subscriber.ledger import AckLedger, AckMode
from eoclient.subscriber.settings import AckRetrySettings
from eoclient.subscriber.waiters import completion, deliver, result_of


async def test_each_waiter_gets_its_result_as_soon_as_it_is_known() -> None:
    ledger = AckLedger(AckRetrySettings(), exactly_once=True)
    ledger.mode = AckMode.STREAM
    (record,) = ledger.submit_many(["a", "b"], Operation.ACK)
    calls: list[AckRecord] = []
    record.when_resolved(calls.append)
    first, second, whole = result_of(record, 0), result_of(record, 1), completion(record)
    ledger.take(0.0, stream_open=True, stopping=False)
    response = pubsub_pb2.StreamingPullResponse()
    response.acknowledge_confirmation.ack_ids.append("b")
    deliver(ledger.on_confirmation(response)[0])
    assert (first.done(), second.done(), whole.done()) == (False, True, False)
    assert second.result().status is AcknowledgeStatus.SUCCESS
    assert calls == []
    response.acknowledge_confirmation.ack_ids[:] = ["a"]
    resolved, _ = ledger.on_confirmation(response)
    deliver(resolved)
    deliver(resolved)  # handing the same results out twice changes nothing
    assert first.result().status is AcknowledgeStatus.SUCCESS
    assert whole.done()
    assert calls == [record]
    # Asked for after the fact: already done, no waiting.
    assert result_of(record, 0).done()
    assert completion(record).done()


async def test_a_cancelled_waiter_leaves_the_others_their_result() -> None:
    ledger = AckLedger(AckRetrySettings())
    record, index = ledger.submit("a", Operation.ACK)
    one = asyncio.ensure_future(asyncio.wait_for(result_of(record, index), 5))
    other = result_of(record, index)
    await asyncio.sleep(0)
    one.cancel()
    deliver(ledger.take(0.0, stream_open=True, stopping=False).resolved)
    assert other.result().status is AcknowledgeStatus.SUCCESS
