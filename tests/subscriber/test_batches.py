"""The batch API: ``async for batch in stream.batches(max_messages=N)`` and
``await batch.ack_with_response()``.

Against the reference server (exactly-once results, flow control, ordering keys, nothing
redelivered), and against the fake transport for what goes on the wire: one request and
one record per batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import uvloop

from eoclient import AcknowledgeStatus, FlowControl, SubscriberClient
from eoclient.errors import RpcError
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber import Message, MessageBatch
from eoclient.subscriber.session import StreamingSession
from eoclient.subscriber.settings import (
    AckRetrySettings,
    LeaseSettings,
    ShutdownOptions,
    StreamSettings,
)

from .fake_transport import (
    FakeStream,
    FakeTransport,
    Request,
    Response,
    confirm_on_stream,
    deliver,
    has_acks,
    rpc_error,
)
from .test_session_support import data_of, make_env

SUCCESS = AcknowledgeStatus.SUCCESS


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def next_batch(stream: StreamingSession, max_messages: int = 100) -> MessageBatch:
    async with asyncio.timeout(5):
        return await anext(stream.batches(max_messages=max_messages))


async def test_batches_come_as_they_arrive_and_each_reports_per_message_in_order(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(250)
    seen: list[str] = []
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription) as stream,
    ):
        async with asyncio.timeout(10):
            async for batch in stream.batches(max_messages=100):
                assert isinstance(batch, list)
                assert 1 <= len(batch) <= 100
                statuses = await batch.ack_with_response()
                assert statuses == [SUCCESS] * len(batch)
                seen += [m.message_id for m in batch]
                if len(seen) == len(ids):
                    break
        stats = stream.statistics()
    assert sorted(seen) == sorted(ids)
    assert stats.ack_results == {"SUCCESS": 250}
    assert stats.outstanding_messages == 0
    assert env.backlog() == 0
    for message_id in ids:
        history = env.history(message_id)
        assert len(history.deliveries) == 1, history  # nothing redelivered
        assert len(history.successful_acks) == 1, history


async def test_a_batch_does_not_wait_to_fill(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=False)
    env.publish(3)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        taken: list[str] = []
        async with asyncio.timeout(5):
            async for batch in s.batches(max_messages=1000):
                taken += [data_of(m) for m in batch]
                batch.ack()
                if len(taken) == 3:
                    break
    assert sorted(taken) == ["m-0", "m-1", "m-2"]


async def test_flow_control_bounds_a_batch_until_its_messages_are_settled(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(10)
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, flow_control=FlowControl(max_messages=4)) as stream,
    ):
        batches = stream.batches(max_messages=100)
        out: list[Message] = []
        async with asyncio.timeout(5):
            while len(out) < 4:
                batch = await anext(batches)
                assert len(out) + len(batch) <= 4
                out += batch
        # Four out: nothing more until some are settled.
        waiting = asyncio.ensure_future(anext(batches))
        done, _ = await asyncio.wait({waiting}, timeout=0.3)
        assert not done
        assert stream.statistics().outstanding_messages == 4
        assert await MessageBatch(out, stream).ack_with_response() == [SUCCESS] * 4
        second = await asyncio.wait_for(waiting, 5)
        assert 1 <= len(second) <= 4
        await second.nack_with_response()


async def test_a_message_settled_on_its_own_keeps_its_settlement(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(3)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        batch: list[Message] = []
        async with asyncio.timeout(5):
            async for more in s.batches(max_messages=3):
                batch += more
                if len(batch) == 3:
                    break
        together = MessageBatch(batch, s)
        first = together[0]
        assert await first.nack_with_response() is SUCCESS
        assert await together.ack_with_response() == [SUCCESS] * 3  # the nack's, then acks
        assert [m.settled for m in together] == ["nack", "ack", "ack"]
        acked = [m.message_id for m in together[1:]]
    for message_id in acked:
        assert len(env.history(message_id).successful_acks) == 1
    assert env.history(first.message_id).successful_acks == []


async def test_batches_keep_one_message_per_ordering_key_out(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True, ordered=True)
    env.publish(6, ordering_key="k")
    order: list[str] = []
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        async with asyncio.timeout(10):
            async for batch in s.batches(max_messages=100):
                assert len(batch) == 1  # the key's next message waits for this one's ack
                order += [data_of(m) for m in batch]
                assert await batch.ack_with_response() == [SUCCESS]
                if len(order) == 6:
                    break
    assert order == [f"m-{i}" for i in range(6)]


async def test_modify_ack_deadline_of_a_batch(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(2)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        batch = await next_batch(s)
        assert await batch.modify_ack_deadline_with_response(120) == [SUCCESS] * len(batch)
        assert [m.settled for m in batch] == [""] * len(batch)  # extended, not settled
        with pytest.raises(ValueError, match=r"0\.\.600"):
            batch.modify_ack_deadline(601)
        assert await batch.modify_ack_deadline_with_response(0) == [SUCCESS] * len(batch)
        assert [m.settled for m in batch] == ["nack"] * len(batch)


async def test_batches_rejects_a_size_below_one(srv: ReferenceServer) -> None:
    env = make_env(srv)
    async with SubscriberClient(srv.address) as client, client.subscribe(env.subscription) as s:
        with pytest.raises(ValueError, match="max_messages"):
            await anext(s.batches(max_messages=0))


# ------------------------------------------------------------ on the wire


def fake_session(transport: FakeTransport) -> StreamingSession:
    return StreamingSession(
        transport,
        "projects/p/subscriptions/s",
        flow_control=FlowControl(),
        lease=LeaseSettings(),
        shutdown=ShutdownOptions(),
        ack_retry=AckRetrySettings(),
        stream=StreamSettings(),
        client_id="batch-test",
    )


async def test_a_batch_is_one_request_and_one_record() -> None:
    transport = FakeTransport()
    transport.on_write = confirm_on_stream
    transport.on_open = lambda stream: stream.respond(
        deliver(*(f"a{i}" for i in range(5)), exactly_once=True)
    )
    async with fake_session(transport) as session:
        batch = await next_batch(session)
        assert [m.ack_id for m in batch] == [f"a{i}" for i in range(5)]
        records = {m._settlement_position() for m in batch}
        assert records == {None}
        pending = asyncio.ensure_future(batch.ack_with_response())
        await asyncio.sleep(0)
        assert len({position[0] for position in map(_position, batch)}) == 1  # one record
        assert await asyncio.wait_for(pending, 2) == [SUCCESS] * 5
        acks = [r for r in transport.stream.later_requests if has_acks(r)]
        assert [list(r.ack_ids) for r in acks] == [[f"a{i}" for i in range(5)]]


def _position(message: object) -> tuple[object, int]:
    position = message._settlement_position()  # type: ignore[attr-defined]
    assert position is not None
    return position  # type: ignore[no-any-return]


async def test_a_failed_session_reports_other_for_a_batch() -> None:
    transport = FakeTransport()
    transport.on_open = lambda stream: stream.respond(deliver("a", "b"))
    async with fake_session(transport) as session:
        batches = session.batches()
        batch = await anext(batches)
        transport.stream.fail(rpc_error("NOT_FOUND", "subscription deleted"))
        with pytest.raises(RpcError, match="subscription deleted"):
            await asyncio.wait_for(anext(batches), 2)
        assert await batch.ack_with_response() == [AcknowledgeStatus.OTHER] * 2
        with pytest.raises(StopAsyncIteration):
            await anext(batches)


async def test_the_loop_is_the_one_the_test_is_parametrized_with(
    request: pytest.FixtureRequest,
) -> None:
    # conftest.py runs this module on asyncio's loop and on uvloop's.
    loop = asyncio.get_running_loop()
    assert isinstance(loop, uvloop.Loop) is ("uvloop" in request.node.name)


async def test_statuses_follow_the_batch_order_whatever_order_its_messages_were_settled() -> None:
    transport = FakeTransport()

    def confirm_all_but_a2(stream: FakeStream, request: Request) -> None:
        response = Response()
        if request.ack_ids:
            confirmation = response.acknowledge_confirmation
            confirmation.ack_ids.extend(i for i in request.ack_ids if i != "a2")
            confirmation.invalid_ack_ids.extend(i for i in request.ack_ids if i == "a2")
        if request.modify_deadline_ack_ids:
            response.modify_ack_deadline_confirmation.ack_ids.extend(
                request.modify_deadline_ack_ids
            )
        stream.respond(response)

    transport.on_write = confirm_all_but_a2
    transport.on_open = lambda stream: stream.respond(deliver("a0", "a1", "a2", exactly_once=True))
    async with fake_session(transport) as session:
        batch: list[Message] = []
        async with asyncio.timeout(5):
            async for more in session.batches():
                batch += more
                if len(batch) == 3:
                    break
        together = MessageBatch(batch, session)
        for message in reversed(together):
            message.ack()  # one record, in the reverse order
        statuses = await asyncio.wait_for(together.ack_with_response(), 5)
    assert [m.ack_id for m in together] == ["a0", "a1", "a2"]
    assert statuses == [SUCCESS, SUCCESS, AcknowledgeStatus.INVALID_ACK_ID]
