"""Shutdown, cancellation and the handler form against the reference server.

"Promptly redelivered" below means well within the 60 s stream ack deadline: only a
nack makes the server hand a message to the next subscriber that soon.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from eoclient import (
    AcknowledgeStatus,
    FlowControl,
    Message,
    ShutdownBehavior,
    ShutdownOptions,
    SubscriberClient,
)
from eoclient.server_stub.server import ReferenceServer, run_server
from eoclient.subscriber.session import SessionState

from .test_session_support import Env, eventually, leftover_tasks, make_env, take

NACK_NOW = ShutdownOptions(behavior=ShutdownBehavior.NACK_IMMEDIATELY)
WAIT = ShutdownOptions(behavior=ShutdownBehavior.WAIT_FOR_PROCESSING)


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def drain(env: Env, client: SubscriberClient, count: int, timeout: float = 5.0) -> set[str]:
    """Receive and ack ``count`` messages with a fresh session; returns their ids."""
    async with client.subscribe(env.subscription) as stream:
        messages = await take(stream, count, timeout=timeout)
        statuses = await asyncio.gather(*(m.ack_with_response() for m in messages))
    assert set(statuses) == {AcknowledgeStatus.SUCCESS}
    return {m.message_id for m in messages}


def nacked(env: Env, message_id: str) -> bool:
    return any(m.seconds == 0 and not m.failure for m in env.history(message_id).modacks)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["eod", "plain"])
async def test_leaving_the_context_nacks_messages_never_handed_out(
    srv: ReferenceServer, exactly_once: bool
) -> None:
    env = make_env(srv, exactly_once=exactly_once)
    ids = env.publish(20)
    before = set(asyncio.all_tasks())
    async with SubscriberClient(srv.address) as client:
        async with client.subscribe(env.subscription) as stream:
            taken = await take(stream, 3)
            await eventually(lambda: stream.statistics().received == 20, what="all received")
            for message in taken:
                assert await message.ack_with_response() is AcknowledgeStatus.SUCCESS
        assert leftover_tasks(before) == set()
        rest = set(ids) - {m.message_id for m in taken}
        assert all(nacked(env, i) for i in rest)
        assert await drain(env, client, 17) == rest
    assert env.backlog() == 0
    assert leftover_tasks(before) == set()


async def test_nack_immediately_policy(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(20)
    async with SubscriberClient(srv.address) as client:
        async with asyncio.timeout(5):  # nothing waits for the two held messages
            async with client.subscribe(env.subscription, shutdown=NACK_NOW) as stream:
                done, *held = await take(stream, 3)
                assert await done.ack_with_response() is AcknowledgeStatus.SUCCESS
        # The held ones were nacked for the application: later acks report OTHER.
        for message in held:
            assert message.settled == "nack"
            assert await message.ack_with_response() is AcknowledgeStatus.OTHER
            assert nacked(env, message.message_id)
        assert await drain(env, client, 19) == set(ids) - {done.message_id}
    assert env.backlog() == 0


async def test_leaving_by_break_gives_an_unsettled_message_back_at_once(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The README's loop, left by `break` with one exactly-once message not settled: the
    # code that could settle it is the code now leaving, so nothing waits for it.
    caplog.set_level(logging.WARNING, logger="eoclient.subscriber")
    env = make_env(srv, exactly_once=True)
    [message_id] = env.publish(1)
    async with SubscriberClient(srv.address) as client:
        # Only a bound against a hang (a wait would take the 30 s of ShutdownOptions'
        # timeout); how long leaving takes is measured by benchmarks/subscriber_leave.py.
        async with asyncio.timeout(20):
            async with client.subscribe(env.subscription) as stream:
                async for message in stream:
                    unsettled = message
                    break
        assert unsettled.settled == "nack"
        # The nack reached the server and its answer came back: recorded, not failed.
        assert nacked(env, message_id)
        # (The server may have handed it out again on the closing stream before reading
        # its end: the session nacks that delivery too, so ``nacked`` may count 2.)
        assert stream.statistics().nacked >= 1
        late = await unsettled.ack_result()
        assert (late.status, late.info) == (
            AcknowledgeStatus.OTHER,
            "shutdown initiated, already nacked",
        )
        # Delivered again at once: the stream's ack deadline is 60 s, so only the nack
        # makes the server hand it out again within drain's 5 s.
        assert await drain(env, client, 1) == {message_id}
    assert [r.getMessage() for r in caplog.records] == []


async def test_wait_for_processing_waits_for_outstanding_messages(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(10)
    async with SubscriberClient(srv.address) as client:
        stream = client.subscribe(env.subscription, shutdown=WAIT)
        async with stream:
            first, second = await take(stream, 2)
            closing = asyncio.create_task(stream.aclose())
            # Closing stops the stream at once and gives back what was never handed out.
            await eventually(lambda: all(nacked(env, i) for i in ids[2:]), what="nacks")
            done, _ = await asyncio.wait({closing}, timeout=0.1)
            assert not done, "aclose() returned while messages were still out"
            # Settled after the stream closed: by unary call, still with a real result.
            assert await first.ack_with_response() is AcknowledgeStatus.SUCCESS
            assert await second.ack_with_response() is AcknowledgeStatus.SUCCESS
            async with asyncio.timeout(5):
                await closing
            assert await anext(stream, None) is None
        assert await drain(env, client, 8) == set(ids[2:])
    assert env.backlog() == 0


async def test_wait_for_processing_gives_up_after_the_timeout_and_says_so(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="eoclient.subscriber")
    env = make_env(srv, exactly_once=True)
    env.publish(2)
    options = ShutdownOptions(behavior=ShutdownBehavior.WAIT_FOR_PROCESSING, timeout=0.2)
    async with SubscriberClient(srv.address) as client:
        async with asyncio.timeout(5):
            async with client.subscribe(env.subscription, shutdown=options) as stream:
                messages = await take(stream, 2)
        for message in messages:
            assert await message.ack_with_response() is AcknowledgeStatus.OTHER
            assert nacked(env, message.message_id)
        assert await drain(env, client, 2) == {m.message_id for m in messages}
    # One line: what it waits for and how long.
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "WARNING",
            f"subscription {env.subscription}: closing waits up to 0.2 s for 2 message(s) "
            "handed out and not settled (ShutdownOptions: WAIT_FOR_PROCESSING), then nacks "
            "them",
        )
    ]


async def test_aclose_is_idempotent_and_concurrent_calls_all_return(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(3)
    before = set(asyncio.all_tasks())
    client = SubscriberClient(srv.address)
    stream = client.subscribe(env.subscription)
    await stream.aclose()  # never entered: nothing to do
    stream = client.subscribe(env.subscription)
    async with stream:
        (message,) = await take(stream, 1)
        message.ack()
        async with asyncio.timeout(5):
            await asyncio.gather(stream.aclose(), stream.aclose(), stream.aclose())
        await stream.aclose()
    await stream.aclose()
    await client.aclose()
    await client.aclose()
    assert leftover_tasks(before) == set()
    assert env.history(message.message_id).successful_acks
    with pytest.raises(RuntimeError):
        await stream.__aenter__()


async def test_cancelling_the_consumer_mid_iteration_leaves_nothing_running(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(10)
    before = set(asyncio.all_tasks())
    got: list[Message] = []

    async with SubscriberClient(srv.address) as client:

        async def consume() -> None:
            async with client.subscribe(env.subscription) as stream:
                async for message in stream:
                    got.append(message)
                    if len(got) == 3:
                        got[0].ack()

        consumer = asyncio.create_task(consume())
        await eventually(lambda: len(got) == 10, what="10 handed out")
        consumer.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await consumer
        assert leftover_tasks(before) == set()
        # The nine unsettled messages were nacked, not left to expire.
        assert await drain(env, client, 9) == set(ids) - {got[0].message_id}
    assert leftover_tasks(before) == set()


async def test_cancelling_aclose_while_it_waits_still_stops_everything(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    env.publish(3)
    before = set(asyncio.all_tasks())
    async with (
        SubscriberClient(srv.address) as client,
        client.subscribe(env.subscription, shutdown=WAIT) as stream,
    ):
        (message,) = await take(stream, 1)
        # aclose() waits (up to 30 s) for the message held here.
        closing = asyncio.create_task(stream.aclose())
        await eventually(lambda: srv.open_streams() == 0, what="stream closed")
        done, _ = await asyncio.wait({closing}, timeout=0.05)
        assert not done
        closing.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await closing
        assert stream.state is SessionState.CLOSED
        assert await message.ack_with_response() is AcknowledgeStatus.OTHER
        # Leaving the context after that returns at once.
    assert leftover_tasks(before) == set()


async def test_leaving_by_an_exception_nacks_held_messages_without_waiting(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(2)
    async with SubscriberClient(srv.address) as client:

        async def buggy_consumer() -> None:
            async with client.subscribe(env.subscription) as stream:
                await take(stream, 2)
                raise KeyError("application bug")

        with pytest.raises(KeyError):
            # Well within the 30 s the default policy would wait.
            await asyncio.wait_for(buggy_consumer(), 5)
        assert await drain(env, client, 2) == set(ids)


# ------------------------------------------------------------------ handler form


async def test_run_processes_everything_and_returns_when_cancelled(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(100)
    before = set(asyncio.all_tasks())
    statuses: Counter[AcknowledgeStatus] = Counter()
    running = 0
    most = 0

    async def handler(message: Message) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001)
        running -= 1
        statuses[await message.ack_with_response()] += 1

    async with SubscriberClient(srv.address) as client:
        runner = asyncio.create_task(
            client.run(env.subscription, handler, flow_control=FlowControl(max_messages=10))
        )
        await eventually(lambda: sum(statuses.values()) == 100, what="100 handled")
        runner.cancel()
        async with asyncio.timeout(5):
            with pytest.raises(asyncio.CancelledError):
                await runner
    assert statuses == {AcknowledgeStatus.SUCCESS: 100}
    assert 1 < most <= 10
    assert env.backlog() == 0
    assert all(len(env.history(i).deliveries) == 1 for i in ids)
    assert leftover_tasks(before) == set()


async def test_run_waits_for_its_running_handlers_when_the_client_closes(
    srv: ReferenceServer, caplog: pytest.LogCaptureFixture
) -> None:
    # run() owns its handlers: closing the client lets a running one finish its work.
    caplog.set_level(logging.WARNING, logger="eoclient.subscriber")
    env = make_env(srv, exactly_once=True)
    [message_id] = env.publish(1)
    started, finish = asyncio.Event(), asyncio.Event()
    statuses: list[AcknowledgeStatus] = []

    async def handler(message: Message) -> None:
        started.set()
        await finish.wait()
        statuses.append(await message.ack_with_response())

    client = SubscriberClient(srv.address)
    runner = asyncio.create_task(client.run(env.subscription, handler))
    async with asyncio.timeout(5):
        await started.wait()
    closing = asyncio.create_task(client.aclose())
    await eventually(lambda: bool(caplog.records), what="the warning")
    assert "closing waits up to 30 s for 1 message(s)" in caplog.records[0].getMessage()
    assert not closing.done()
    finish.set()
    async with asyncio.timeout(10):
        await closing
        await runner
    assert statuses == [AcknowledgeStatus.SUCCESS]
    assert env.history(message_id).successful_acks
    assert len(caplog.records) == 1


async def test_a_raising_handler_has_its_message_nacked_and_redelivered(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(5)
    poison = ids[2]
    attempts: Counter[str] = Counter()
    acked: set[str] = set()

    async def handler(message: Message) -> None:
        attempts[message.message_id] += 1
        if message.message_id == poison and attempts[poison] == 1:
            raise RuntimeError("first attempt fails")
        if await message.ack_with_response() is AcknowledgeStatus.SUCCESS:
            acked.add(message.message_id)

    async with SubscriberClient(srv.address) as client:
        runner = asyncio.create_task(client.run(env.subscription, handler))
        try:
            await eventually(lambda: acked == set(ids), what="all acked")
        finally:
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
    assert attempts[poison] == 2
    assert nacked(env, poison)
    assert env.backlog() == 0


async def test_cancelled_handlers_give_their_messages_back(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    ids = env.publish(4)
    started: list[str] = []

    async def handler(message: Message) -> None:
        started.append(message.message_id)
        await asyncio.Event().wait()  # never finishes

    async with SubscriberClient(srv.address) as client:
        runner = asyncio.create_task(client.run(env.subscription, handler))
        await eventually(lambda: len(started) == 4, what="4 handlers running")
        runner.cancel()
        async with asyncio.timeout(5):  # no 30 s wait for handlers that were cancelled
            with pytest.raises(asyncio.CancelledError):
                await runner
        assert await drain(env, client, 4) == set(ids)


async def test_run_raises_a_permanent_error(srv: ReferenceServer) -> None:
    env = make_env(srv, exactly_once=True)
    srv.faults.fail("StreamingPull", "NOT_FOUND", times=-1)

    async def handler(message: Message) -> None:
        raise AssertionError("no message expected")

    from eoclient.errors import NotFound

    async with SubscriberClient(srv.address) as client:
        with pytest.raises(NotFound):
            async with asyncio.timeout(5):
                await client.run(env.subscription, handler)
