"""The streaming session against an in-memory fake transport (test tier 2).

Two groups:

* Cancellation at every await the session reaches: the fake blocks at one await point,
  the consumer (or ``aclose()``) is cancelled by ``asyncio.timeout(0.05)``, and then no
  task is left behind, the cancellation came out as itself, ``aclose()`` completes and is
  idempotent, and the bookkeeping is consistent
  (docs/architecture.md#client-logic-against-a-fake-transport).
* Protocol details that a real server makes hard to pin down: the first request, the
  reconnect policy per status code, keep-alives, the exactly-once mode probe, and how
  ambiguous and partially failed acks are reported.

The integration tests (``test_session_*.py``) cover the same session against the
reference server; nothing here duplicates them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
from collections.abc import Awaitable, Callable

import pytest

from eoclient._clock import Clock, FakeClock
from eoclient.errors import RpcError, rpc_error_class
from eoclient.subscriber import ledger as ledger_module
from eoclient.subscriber.ack_results import (
    PERMANENT_FAILURE_INVALID_ACK_ID,
    TEMPORARY_FAILURE,
    AcknowledgeStatus,
)
from eoclient.subscriber.message import Message
from eoclient.subscriber.session import SessionState, StreamingSession
from eoclient.subscriber.settings import (
    AckRetrySettings,
    FlowControl,
    LeaseSettings,
    ShutdownBehavior,
    ShutdownOptions,
    StreamSettings,
)

from .fake_transport import (
    ACKNOWLEDGE,
    DONE_WRITING,
    MODIFY_ACK_DEADLINE,
    OPEN,
    READ,
    WRITE,
    FakeStream,
    FakeTransport,
    Gate,
    Request,
    Response,
    confirm_on_stream,
    deliver,
    eod_ack_failure,
    has_acks,
    has_modacks,
    is_keepalive,
    rpc_error,
    until,
)

SUBSCRIPTION = "projects/p/subscriptions/s"
CLIENT_ID = "client-under-test"
FAST_RETRY = AckRetrySettings(initial_backoff=0.01, max_backoff=0.02, deadline=2.0)
FAST_RECONNECT = StreamSettings(reconnect_initial_backoff=0.01, reconnect_max_backoff=0.02)
RETRYABLE = [
    "UNAVAILABLE",
    "DEADLINE_EXCEEDED",
    "INTERNAL",
    "RESOURCE_EXHAUSTED",
    "ABORTED",
    "UNKNOWN",
]
PERMANENT = [
    "NOT_FOUND",
    "PERMISSION_DENIED",
    "INVALID_ARGUMENT",
    "FAILED_PRECONDITION",
    "UNAUTHENTICATED",
]


def make_session(
    transport: FakeTransport,
    *,
    flow_control: FlowControl | None = None,
    lease: LeaseSettings | None = None,
    shutdown: ShutdownOptions | None = None,
    stream: StreamSettings = FAST_RECONNECT,
    clock: Clock | None = None,
    rng: random.Random | None = None,
) -> StreamingSession:
    return StreamingSession(
        transport,
        SUBSCRIPTION,
        flow_control=flow_control or FlowControl(),
        lease=lease or LeaseSettings(),
        shutdown=shutdown or ShutdownOptions(),
        ack_retry=FAST_RETRY,
        stream=stream,
        client_id=CLIENT_ID,
        clock=clock,
        rng=rng,
    )


async def take(session: StreamingSession, count: int) -> list[Message]:
    async with asyncio.timeout(2):
        return [await anext(session) for _ in range(count)]


class MaxJitter(random.Random):
    """Jitter that always picks the top of the range, so the backoff is visible; records it."""

    def __init__(self) -> None:
        super().__init__(0)
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return b


def leftover_tasks(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if not t.done() and t not in before and t is not current}


def assert_consistent(session: StreamingSession) -> None:
    """Statistics never negative; a message is in at most one of held / ready / out."""
    stats = session.statistics()
    for name, value in dataclasses.asdict(stats).items():
        if isinstance(value, int):
            assert value >= 0, f"{name} = {value}"
    held = set(session.dispatch.held)
    out = set(session.dispatch.out)
    ready = {m.ack_id for m in session.dispatch.ready}
    assert not held & out, f"both held and out: {held & out}"
    assert not held & ready, f"both held and ready: {held & ready}"
    assert not ready & out, f"both ready and out: {ready & out}"
    assert stats.outstanding_messages == len(out) + len(ready)


async def assert_closed_cleanly(
    session: StreamingSession, transport: FakeTransport, before: set[asyncio.Task[object]]
) -> None:
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0, "a cancellation request was left over"
    assert session.state is SessionState.CLOSED
    assert leftover_tasks(before) == set()
    assert all(call.done() for call in transport.streams), "a stream was left open"
    async with asyncio.timeout(1):  # idempotent, and quick once closed
        await session.aclose()
        await session.aclose()
    assert_consistent(session)
    stats = session.statistics()
    assert (stats.outstanding_messages, stats.outstanding_bytes, stats.held_messages) == (0, 0, 0)
    assert stats.leased_messages == 0
    assert not session.dispatch.ready
    assert not session.dispatch.out
    assert not session.dispatch.held
    transport.release_all()


# Short shutdown waits (2 s for the stream's end, 10 s for the ack flush by default): the
# blocked await points below would otherwise make each close wait them out in full. The
# sessions wait for processing, so that waiting is one of the await points.
QUICK_SHUTDOWN = ShutdownOptions(
    ShutdownBehavior.WAIT_FOR_PROCESSING, flush_timeout=0.2, stream_close_timeout=0.2
)


# ===================================================================== cancellation


@dataclasses.dataclass
class Drive:
    """What a scenario gets: ``arm()`` starts the 50 ms timeout; ``taken`` records messages."""

    arm: Callable[[], None]
    taken: list[Message] = dataclasses.field(default_factory=list)
    checks: list[Callable[[], None]] = dataclasses.field(default_factory=list)  # after close

    async def take(self, session: StreamingSession, count: int) -> list[Message]:
        messages = await take(session, count)
        self.taken += messages
        return messages


# A scenario sets the fake up, drives the session until one await point is blocked,
# calls ``arm()``, then makes the consumer wait on something that cannot finish; it
# never returns.
Scenario = Callable[[StreamingSession, FakeTransport, Drive], Awaitable[None]]


def eod_confirming(
    *, acks_fail_temporarily: bool = False, modacks_fail_temporarily: bool = False
) -> Callable[[FakeStream, Request], None]:
    """An exactly-once server that confirms on the stream (optionally: temporary failures)."""

    def on_write(call: FakeStream, request: Request) -> None:
        response = Response()
        if request.ack_ids:
            target = response.acknowledge_confirmation
            ids = target.temporary_failed_ack_ids if acks_fail_temporarily else target.ack_ids
            ids.extend(request.ack_ids)
        if request.modify_deadline_ack_ids:
            m = response.modify_ack_deadline_confirmation
            ids = m.temporary_failed_ack_ids if modacks_fail_temporarily else m.ack_ids
            ids.extend(request.modify_deadline_ack_ids)
        if request.ack_ids or request.modify_deadline_ack_ids:
            call.respond(response)

    return on_write


def on_first_stream(*responses: Response) -> Callable[[FakeStream], None]:
    def on_open(call: FakeStream) -> None:
        if call.index == 0:
            call.respond(*responses)

    return on_open


async def blocked_opening(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(OPEN)
    await gate.wait_reached()
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_reading(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(READ)
    transport.on_open = on_first_stream(deliver("a1", exactly_once=False))
    await gate.wait_reached()
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_waiting_in_anext(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    await transport.wait_for_stream(0)
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_writing_keepalive(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(WRITE, is_keepalive)
    await gate.wait_reached()
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_writing_plain_ack(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(WRITE, has_acks)
    transport.on_open = on_first_stream(deliver("a1", exactly_once=False))
    (message,) = await drive.take(session, 1)
    message.ack()
    await gate.wait_reached()
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_writing_eod_ack(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(WRITE, has_acks)
    transport.on_write = eod_confirming()
    transport.on_open = on_first_stream(deliver("a1", exactly_once=True))
    (message,) = await drive.take(session, 1)
    message.ack()
    await gate.wait_reached()
    drive.arm()
    await message.ack_with_response()
    raise AssertionError("unreachable")


async def blocked_in_unary_ack(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(ACKNOWLEDGE)
    transport.on_write = eod_confirming(acks_fail_temporarily=True)
    transport.on_open = on_first_stream(deliver("a1", exactly_once=True))
    (message,) = await drive.take(session, 1)
    message.ack()
    await gate.wait_reached()
    drive.arm()
    await message.ack_with_response()
    raise AssertionError("unreachable")


async def blocked_in_unary_modack(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    gate = transport.block(MODIFY_ACK_DEADLINE)
    transport.on_write = eod_confirming(modacks_fail_temporarily=True)
    transport.on_open = on_first_stream(deliver("a1", exactly_once=True))
    await gate.wait_reached()
    drive.arm()
    await anext(session)
    raise AssertionError("unreachable")


async def blocked_in_reconnect_backoff(
    session: StreamingSession, transport: FakeTransport, drive: Drive
) -> None:
    transport.on_open = on_first_stream(deliver("a1", exactly_once=False))
    (message,) = await drive.take(session, 1)
    transport.stream.fail(rpc_error("UNAVAILABLE", "gone"))
    await until(lambda: session.statistics().reconnects == 1, what="backing off")
    # Acked between streams: the sender waits for the next stream with it.
    message.ack()
    drive.arm()

    def went_by_unary_call_at_shutdown() -> None:
        assert [c.ack_ids for c in transport.calls(ACKNOWLEDGE)] == [["a1"]]
        assert len(transport.streams) == 1

    drive.checks.append(went_by_unary_call_at_shutdown)
    await anext(session)
    raise AssertionError("unreachable")


CONSUMER_SCENARIOS: dict[str, Scenario] = {
    "opening-the-stream": blocked_opening,
    "reading-a-response": blocked_reading,
    "waiting-in-anext": blocked_waiting_in_anext,
    "writing-a-keepalive": blocked_writing_keepalive,
    "writing-acks": blocked_writing_plain_ack,
    "writing-eod-acks": blocked_writing_eod_ack,
    "unary-ack-call": blocked_in_unary_ack,
    "unary-modack-call": blocked_in_unary_modack,
    "reconnect-backoff": blocked_in_reconnect_backoff,
}
SCENARIO_SETTINGS = {
    "writing-a-keepalive": StreamSettings(keepalive_interval=0.02),
    "reconnect-backoff": StreamSettings(reconnect_initial_backoff=10, reconnect_max_backoff=10),
}


@pytest.mark.parametrize("name", list(CONSUMER_SCENARIOS))
async def test_cancelling_the_consumer_at_each_await(name: str) -> None:
    before = set(asyncio.all_tasks())
    transport = FakeTransport()
    session = make_session(
        transport,
        stream=SCENARIO_SETTINGS.get(name, FAST_RECONNECT),
        rng=MaxJitter(),
        shutdown=QUICK_SHUTDOWN,
    )
    loop = asyncio.get_running_loop()
    # The CancelledError has to travel out of the session (__anext__, ack_with_response,
    # __aexit__) for asyncio.timeout to turn it into TimeoutError; swallowed, the block
    # would end normally (and the scenario's AssertionError would say so).
    drive = Drive(lambda: None)

    async def consume() -> None:
        async with asyncio.timeout(None) as deadline:

            def arm() -> None:
                assert_consistent(session)  # as it stands, blocked at the await point
                deadline.reschedule(loop.time() + 0.05)

            drive.arm = arm
            async with session:
                await CONSUMER_SCENARIOS[name](session, transport, drive)

    with pytest.raises(TimeoutError):
        await consume()
    assert [g for g in transport.gates if g.hits == 0] == [], "the await point was not reached"
    await assert_closed_cleanly(session, transport, before)
    for check in drive.checks:
        check()
    if session.ledger.exactly_once:
        # Acked but never confirmed (the write or the call never finished): the result
        # must not claim the ack was applied.
        for message in drive.taken:
            assert (await message.ack_result()).status is AcknowledgeStatus.OTHER


# ------------------------------------------------------------- aclose() cancelled

AcloseSetup = Callable[[StreamingSession, FakeTransport], Awaitable[Gate | None]]


async def waiting_for_an_outstanding_message(
    session: StreamingSession, transport: FakeTransport
) -> Gate | None:
    transport.on_open = on_first_stream(deliver("a1", exactly_once=False))
    await take(session, 1)  # held, never settled: aclose() waits for it (up to 30 s)
    return None


async def half_closing_the_stream(
    session: StreamingSession, transport: FakeTransport
) -> Gate | None:
    await transport.wait_for_stream(0)
    return transport.block(DONE_WRITING)


async def writing_the_shutdown_nacks(
    session: StreamingSession, transport: FakeTransport
) -> Gate | None:
    # One message out, two held by flow control: shutdown nacks the held ones on the
    # stream before half-closing it.
    transport.on_open = on_first_stream(deliver("a1", "a2", "a3", exactly_once=False))
    await take(session, 1)
    await until(lambda: session.statistics().held_messages == 2, what="two held")
    return transport.block(WRITE, lambda r: has_modacks(r) and 0 in r.modify_deadline_seconds)


async def flushing_a_unary_ack(session: StreamingSession, transport: FakeTransport) -> Gate | None:
    transport.on_write = eod_confirming(acks_fail_temporarily=True)
    transport.on_open = on_first_stream(deliver("a1", exactly_once=True))
    gate = transport.block(ACKNOWLEDGE)
    (message,) = await take(session, 1)
    message.ack()
    await gate.wait_reached()
    return gate


ACLOSE_SCENARIOS: dict[str, AcloseSetup] = {
    "waiting-for-processing": waiting_for_an_outstanding_message,
    "half-closing-the-stream": half_closing_the_stream,
    "writing-shutdown-nacks": writing_the_shutdown_nacks,
    "flushing-acks": flushing_a_unary_ack,
}


@pytest.mark.parametrize("name", list(ACLOSE_SCENARIOS))
async def test_cancelling_aclose_at_each_await(name: str) -> None:
    before = set(asyncio.all_tasks())
    transport = FakeTransport()
    flow = FlowControl(max_messages=1) if name == "writing-shutdown-nacks" else None
    session = make_session(transport, flow_control=flow, shutdown=QUICK_SHUTDOWN)
    await session.__aenter__()
    gate = await ACLOSE_SCENARIOS[name](session, transport)
    closing = asyncio.ensure_future(session.aclose())
    if gate is not None:
        await gate.wait_reached()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await closing
    assert closing.cancelled()
    await assert_closed_cleanly(session, transport, before)


async def test_a_second_aclose_waits_for_the_first_and_survives_its_cancellation() -> None:
    before = set(asyncio.all_tasks())
    transport = FakeTransport()
    session = make_session(transport, shutdown=QUICK_SHUTDOWN)
    await session.__aenter__()
    await waiting_for_an_outstanding_message(session, transport)
    first = asyncio.ensure_future(session.aclose())
    await asyncio.sleep(0.01)
    second = asyncio.ensure_future(session.aclose())
    await asyncio.sleep(0.01)
    assert not second.done()
    first.cancel()
    async with asyncio.timeout(2):
        with pytest.raises(asyncio.CancelledError):
            await first
        await second  # returns, not cancelled: the first close still finished the job
    await assert_closed_cleanly(session, transport, before)


# ====================================================================== protocol


@pytest.mark.parametrize(
    ("lease", "expected_deadline"),
    [(LeaseSettings(), 60), (LeaseSettings(max_extension=120), 120)],
    ids=["default-60s", "max-extension"],
)
async def test_first_request_fields_and_client_id_stable_across_reconnects(
    lease: LeaseSettings, expected_deadline: int
) -> None:
    transport = FakeTransport()

    def on_write(call: FakeStream, request: Request) -> None:
        if call.index < 2:
            call.fail(rpc_error("UNAVAILABLE", "try again"))
        elif request.subscription:
            call.respond(deliver("a1"))

    transport.on_write = on_write
    flow = FlowControl(max_messages=7, max_bytes=12_345)
    async with make_session(transport, flow_control=flow, lease=lease) as session:
        (message,) = await take(session, 1)
        message.ack()
        first = transport.streams[0].initial_request
        assert first.subscription == SUBSCRIPTION
        assert first.stream_ack_deadline_seconds == expected_deadline
        assert first.client_id == CLIENT_ID
        assert first.max_outstanding_messages == 7
        assert first.max_outstanding_bytes == 12_345
        assert not first.ack_ids
        assert not first.modify_deadline_ack_ids
        assert len(transport.streams) == 3
        # Every reopened stream starts with the same request, the same client id included.
        assert [s.initial_request for s in transport.streams] == [first] * 3
        # Only the first request of a stream names the subscription.
        assert all(not r.subscription for r in transport.stream.later_requests)
        assert session.statistics().reconnects == 2


@pytest.mark.parametrize("status", RETRYABLE)
async def test_retryable_status_reconnects_with_exponential_backoff(status: str) -> None:
    transport = FakeTransport()

    def on_open(call: FakeStream) -> None:
        if call.index == 0:
            call.fail(error_for(call))  # refused at once: the first write raises it
        elif call.index == 3:
            call.respond(deliver("a1"))

    def on_write(call: FakeStream, request: Request) -> None:
        if call.index in (1, 2):
            call.fail(error_for(call))  # failing once open: reading raises it

    def error_for(call: FakeStream) -> RpcError:
        return rpc_error(status, f"{status} #{call.index}")

    transport.on_open = on_open
    transport.on_write = on_write
    rng = MaxJitter()
    settings = StreamSettings(reconnect_initial_backoff=0.02, reconnect_max_backoff=0.05)
    async with make_session(transport, stream=settings, rng=rng) as session:
        (message,) = await take(session, 1)
        message.ack()
        # Doubling from the initial backoff, capped at the maximum.
        assert rng.ranges == [(0, 0.02), (0, 0.04), (0, 0.05)]
        opened = [s.opened_at for s in transport.streams]
        gaps = [b - a for a, b in itertools.pairwise(opened)]
        assert all(gap >= delay * 0.9 for gap, delay in zip(gaps, [0.02, 0.04, 0.05], strict=True))
        assert session.statistics().reconnects == 3
        # A response resets the backoff: the next break waits the initial delay again.
        transport.stream.fail(rpc_error(status, "again"))
        await transport.wait_for_stream(4)
        assert session.statistics().reconnects == 4
        assert rng.ranges[3:] == [(0, 0.02)]


@pytest.mark.parametrize("status", PERMANENT)
@pytest.mark.parametrize("when", ["at-open", "mid-stream"])
async def test_permanent_status_ends_the_session_and_is_raised_once(status: str, when: str) -> None:
    transport = FakeTransport()
    error = rpc_error(status, "no way")

    def on_open(call: FakeStream) -> None:
        if when == "at-open":
            call.fail(error)
        else:
            call.respond(deliver("a1", exactly_once=False))

    transport.on_open = on_open
    session = make_session(transport)

    async def consume() -> None:
        async with session:
            async for message in session:
                assert message.ack_id == "a1"
                transport.stream.fail(error)

    with pytest.raises(rpc_error_class(status)) as raised:
        await consume()
    assert isinstance(raised.value, RpcError)
    assert raised.value.code == status
    assert raised.value.message == "no way"
    # Raised once: afterwards the iteration is simply over.
    with pytest.raises(StopAsyncIteration):
        await anext(session)
    await asyncio.sleep(0.05)  # several reconnect backoffs: none happens
    assert len(transport.streams) == 1
    assert session.statistics().reconnects == 0


async def test_permanent_status_reaches_a_consumer_waiting_in_anext() -> None:
    transport = FakeTransport()
    async with make_session(transport) as session:
        await transport.wait_for_stream(0)
        waiting = asyncio.ensure_future(anext(session))
        await asyncio.sleep(0.01)
        transport.stream.fail(rpc_error("PERMISSION_DENIED", "denied"))
        async with asyncio.timeout(1):
            with pytest.raises(rpc_error_class("PERMISSION_DENIED")):
                await waiting
        with pytest.raises(StopAsyncIteration):
            await anext(session)


async def test_keepalives_are_written_after_the_keepalive_interval() -> None:
    transport = FakeTransport()
    interval = 0.05
    settings = StreamSettings(keepalive_interval=interval)
    async with make_session(transport, stream=settings):
        stream = await transport.wait_for_stream(0)
        await until(lambda: stream.keepalives() >= 4, timeout=2, what="four keep-alives")
        times = [
            t for r, t in zip(stream.requests, stream.write_times, strict=True) if is_keepalive(r)
        ]
    # Spaced by the interval, not sent in a busy loop.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= interval * 0.9 for gap in gaps), gaps


async def test_no_keepalive_while_the_interval_has_not_passed() -> None:
    transport = FakeTransport()
    async with make_session(transport, stream=StreamSettings(keepalive_interval=30)):
        stream = await transport.wait_for_stream(0)
        await asyncio.sleep(0.1)
        # At most the one sent when the stream opened.
        assert stream.keepalives() <= 1


async def test_exactly_once_with_stream_confirmations_uses_the_stream() -> None:
    transport = FakeTransport()
    transport.on_write = confirm_on_stream
    transport.on_open = on_first_stream(deliver("a1", "a2", exactly_once=True))
    async with make_session(transport) as session:
        messages = await take(session, 2)
        # The receipts went both ways while the mode was unknown; the stream's
        # confirmation settles it.
        await until(lambda: session.statistics().ack_mode == "stream", what="stream mode")
        statuses = [await m.ack_with_response() for m in messages]
        assert statuses == [AcknowledgeStatus.SUCCESS] * 2
        stream = transport.stream
        assert {("a1", 60), ("a2", 60)} <= set(stream.modacks())
        assert stream.acked_ids() == ["a1", "a2"]
    (receipts,) = transport.unary_calls
    assert (receipts.method, receipts.ack_ids, receipts.seconds) == (
        MODIFY_ACK_DEADLINE,
        ["a1", "a2"],
        60,
    )


async def enter_unary_mode(
    session: StreamingSession, transport: FakeTransport, clock: FakeClock, ids: list[str]
) -> list[Message]:
    """Deliver ``ids`` on an exactly-once stream that never confirms; pass the probe timeout."""
    transport.on_open = on_first_stream(deliver(*ids, exactly_once=True))
    stream = await transport.wait_for_stream(0)
    # The receipt modacks go on the stream (the probe) and by unary call at once; the
    # unary answer hands the messages out without waiting for the probe.
    messages = await take(session, len(ids))
    assert [i for i, _ in stream.modacks()] == ids
    (receipts,) = transport.calls(MODIFY_ACK_DEADLINE)
    assert (receipts.ack_ids, receipts.seconds) == (ids, 60)
    assert session.statistics().ack_mode == "unknown"
    clock.advance(ledger_module.PROBE_TIMEOUT)
    session.sender.wake.set()
    await until(lambda: session.statistics().ack_mode == "unary", what="unary mode")
    return messages


async def test_exactly_once_without_confirmations_goes_unary_at_once() -> None:
    transport = FakeTransport()
    clock = FakeClock()
    async with make_session(transport, clock=clock) as session:
        messages = await enter_unary_mode(session, transport, clock, ["a1", "a2"])
        # The probe's stream copies were answered by their unary copies: not sent again.
        assert len(transport.calls(MODIFY_ACK_DEADLINE)) == 1
        for message in messages:
            message.ack()
        statuses = [await m.ack_with_response() for m in messages]
        assert statuses == [AcknowledgeStatus.SUCCESS] * 2
        assert [c.ack_ids for c in transport.calls(ACKNOWLEDGE)] == [["a1", "a2"]]
        assert transport.stream.acked_ids() == []  # acks never went on the stream


async def test_acks_while_the_mode_is_unknown_go_by_unary_call_only() -> None:
    transport = FakeTransport()
    transport.on_open = on_first_stream(deliver("a1", "a2", exactly_once=True))
    async with make_session(transport) as session:
        messages = await take(session, 2)
        assert session.statistics().ack_mode == "unknown"
        statuses = [await m.ack_with_response() for m in messages]
        nacked = await (await take_after_redelivery(session, transport, "a3")).nack_with_response()
        assert statuses == [AcknowledgeStatus.SUCCESS] * 2
        assert nacked is AcknowledgeStatus.SUCCESS
        assert [c.ack_ids for c in transport.calls(ACKNOWLEDGE)] == [["a1"], ["a2"]]
        # An ack or nack applied twice reports INVALID_ACK_ID the second time: never doubled.
        assert transport.stream.acked_ids() == []
        assert ("a3", 0) not in transport.stream.modacks()
        assert [(c.ack_ids, c.seconds) for c in transport.calls(MODIFY_ACK_DEADLINE)][-1] == (
            ["a3"],
            0,
        )


async def take_after_redelivery(
    session: StreamingSession, transport: FakeTransport, ack_id: str
) -> Message:
    transport.stream.respond(deliver(ack_id, exactly_once=True))
    (message,) = await take(session, 1)
    return message


async def test_ack_lost_with_its_stream_then_found_invalid_is_other_not_success() -> None:
    transport = FakeTransport()

    def on_write(call: FakeStream, request: Request) -> None:
        if request.ack_ids:
            # The stream breaks after the ack was written, before any confirmation.
            call.fail(rpc_error("UNAVAILABLE", "connection reset"))
        else:
            confirm_on_stream(call, request)

    transport.on_write = on_write
    transport.on_open = on_first_stream(deliver("a1", exactly_once=True))
    # The unary retry finds the id settled: maybe by our lost ack, maybe not.
    transport.on_acknowledge = lambda call: eod_ack_failure(
        dict.fromkeys(call.ack_ids, PERMANENT_FAILURE_INVALID_ACK_ID)
    )
    async with make_session(transport) as session:
        (message,) = await take(session, 1)
        result = await message.ack_result()
        assert result.status is AcknowledgeStatus.OTHER
        assert PERMANENT_FAILURE_INVALID_ACK_ID in result.info
        assert [c.ack_ids for c in transport.calls(ACKNOWLEDGE)] == [["a1"]]
        assert transport.streams[0].acked_ids() == ["a1"]
        await transport.wait_for_stream(1)  # and the session reconnected


async def test_ids_not_listed_in_a_failed_exactly_once_response_succeeded() -> None:
    transport = FakeTransport()
    clock = FakeClock()
    failures = {"a2": PERMANENT_FAILURE_INVALID_ACK_ID, "a4": TEMPORARY_FAILURE}
    answers = iter([eod_ack_failure(failures), None])
    transport.on_acknowledge = lambda call: next(answers)
    async with make_session(transport, clock=clock) as session:
        messages = await enter_unary_mode(session, transport, clock, ["a1", "a2", "a3", "a4"])
        for message in messages:  # settled together: one batch, one call
            message.ack()
        results = {m.ack_id: (await m.ack_result()).status for m in messages}
    assert results == {
        "a1": AcknowledgeStatus.SUCCESS,  # not listed: applied
        "a2": AcknowledgeStatus.INVALID_ACK_ID,  # listed as permanently invalid
        "a3": AcknowledgeStatus.SUCCESS,  # not listed: applied
        "a4": AcknowledgeStatus.SUCCESS,  # listed as transient, then retried alone
    }
    assert [c.ack_ids for c in transport.calls(ACKNOWLEDGE)] == [["a1", "a2", "a3", "a4"], ["a4"]]


async def test_an_ack_first_sent_by_unary_call_and_found_invalid_is_invalid() -> None:
    """The control for the ambiguous case: nothing was lost, so INVALID_ACK_ID stands."""
    transport = FakeTransport()
    clock = FakeClock()
    transport.on_acknowledge = lambda call: eod_ack_failure(
        dict.fromkeys(call.ack_ids, PERMANENT_FAILURE_INVALID_ACK_ID)
    )
    async with make_session(transport, clock=clock) as session:
        (message,) = await enter_unary_mode(session, transport, clock, ["a1"])
        assert await message.ack_with_response() is AcknowledgeStatus.INVALID_ACK_ID
