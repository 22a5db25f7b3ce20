"""StreamingPull's rules without gRPC: the session of ``services/streaming_pull.py`` driven
as the door drives it (``open``, ``receive``, ``next_step``), on a broker with a fake
clock, and a stand-in for the group commit whose commits the test lets happen.
(The same rules over the wire: tests/server_stub/doors/grpc/test_grpc_streaming.py.)"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.errors import InvalidArgument, NotFound, ResourceExhausted, Unavailable
from eoclient.server_stub.access.limits import StreamLimits
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.services.faults import InjectedStatus
from eoclient.server_stub.services.open_streams import StreamRegistry
from eoclient.server_stub.services.streaming_pull import (
    MAX_BYTES_PER_RESPONSE,
    MAX_GROUPS_WAITING,
    DeliveryBatch,
    Step,
    StreamingPullSession,
    cut,
)
from eoclient.server_stub.services.table import Services

TOPIC = "projects/p1/topics/stream-topic"
SUB = "projects/p1/subscriptions/stream-sub"
INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"


class HeldCommits:
    """Stands in for the group commit: what changed waits for a commit the test makes."""

    def __init__(self) -> None:
        self.waiters: list[asyncio.Future[None]] = []

    def pending(self) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        return waiter

    def commit(self) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)

    def fail(self, error: BaseException) -> None:
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_exception(error)


class Bench:
    """A broker on a fake clock with one topic, the services over it, the open streams."""

    def __init__(self, commits: HeldCommits | None = None, limits: StreamLimits | None = None):
        self.clock = FakeClock()
        self.broker = Broker(self.clock)
        self.broker.topics.create(TopicConfig(TOPIC))
        self.streams = StreamRegistry(limits)
        self.broker.set_listener(self.streams.notify)
        self.services = Services(self.broker, group_commit=commits, streams=self.streams)

    def subscribe(self, **settings: Any) -> None:
        self.broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC, **settings))

    def publish(self, *datas: bytes, key: str = "") -> list[str]:
        return self.broker.publishing.publish(
            TOPIC, [NewMessage(data, ordering_key=key) for data in datas]
        )

    def open(self, **fields: Any) -> StreamingPullSession:
        first = pb.StreamingPullRequest(
            **{"subscription": SUB, "stream_ack_deadline_seconds": 30, **fields}
        )
        return self.services.streaming_pull.open(first, None, "ipv4:127.0.0.1:1")


def deliveries(step: Step) -> list[Any]:
    return [d for r in step.responses if isinstance(r, DeliveryBatch) for d in r.deliveries]


def protobufs(step: Step) -> list[pb.StreamingPullResponse]:
    return [r for r in step.responses if isinstance(r, pb.StreamingPullResponse)]


async def step_within(session: StreamingPullSession, seconds: float = 2.0) -> Step:
    # A bound on a wait that must end at once (the session has something to send): a
    # regression hangs here rather than the whole test run.
    return await asyncio.wait_for(session.next_step(), seconds)


async def is_waiting(session: StreamingPullSession) -> bool:
    """Whether ``next_step`` has nothing to send now (it waits for a wake-up)."""
    task = asyncio.ensure_future(session.next_step())
    for _ in range(5):
        await asyncio.sleep(0)
    waiting = not task.done()
    task.cancel()
    return waiting


# ------------------------------------------------------------ first request


@pytest.mark.parametrize(
    ("fields", "error", "words"),
    [
        ({"subscription": ""}, InvalidArgument, "must set subscription"),
        ({"stream_ack_deadline_seconds": 0}, InvalidArgument, "stream_ack_deadline_seconds"),
        ({"stream_ack_deadline_seconds": 601}, InvalidArgument, "between 10"),
        ({"modify_deadline_seconds": [10]}, InvalidArgument, "same length"),
        (
            {"modify_deadline_seconds": [601], "modify_deadline_ack_ids": ["x"]},
            InvalidArgument,
            "modify_deadline_seconds[0]",
        ),
        ({"subscription": "projects/p1/subscriptions/none"}, NotFound, "none"),
    ],
)
async def test_a_refused_first_request_leaves_nothing_open(
    fields: dict[str, Any], error: type[Exception], words: str
) -> None:
    bench = Bench()
    bench.subscribe()
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        bench.open(**fields)
    assert bench.streams.count() == 0
    assert bench.broker.leasing.open_streams() == 0


async def test_streams_beyond_the_limit_are_refused() -> None:
    bench = Bench(limits=StreamLimits(max_streams=1))
    bench.subscribe()
    first = bench.open()
    with pytest.raises(ResourceExhausted, match="--max-streams"):
        bench.open()
    first.close()
    first.close()  # idempotent
    bench.open().close()
    assert bench.streams.count() == 0


async def test_an_injected_fault_fails_the_call_once() -> None:
    bench = Bench()
    bench.services.faults.fail("StreamingPull", "UNAVAILABLE", "go away")
    with pytest.raises(Unavailable, match="go away"):
        bench.services.streaming_pull.check_fault()
    bench.services.streaming_pull.check_fault()


async def test_the_first_requests_acks_are_applied() -> None:
    bench = Bench()
    bench.subscribe()
    bench.publish(b"m")
    [delivery] = bench.broker.leasing.pull(SUB, 1)
    session = bench.open(ack_ids=[delivery.ack_id])
    assert bench.broker.backlog(SUB) == 0
    session.close()


# ------------------------------------------------------------ later requests


@pytest.mark.parametrize(
    "fields",
    [
        {"subscription": SUB},
        {"max_outstanding_messages": 5},
        {"max_outstanding_bytes": 5},
        {"modify_deadline_seconds": [10, 10], "modify_deadline_ack_ids": ["a"]},
        {"modify_deadline_seconds": [-1], "modify_deadline_ack_ids": ["a"]},
    ],
)
async def test_a_refused_later_request_applies_nothing(fields: dict[str, Any]) -> None:
    bench = Bench()
    bench.subscribe()
    bench.publish(b"m")
    session = bench.open()
    [delivery] = deliveries(await step_within(session))
    with pytest.raises(InvalidArgument):
        session.receive(pb.StreamingPullRequest(ack_ids=[delivery.ack_id], **fields))
    assert bench.broker.backlog(SUB) == 1  # the ack of the refused request was not applied
    session.close()


async def test_a_refused_request_ends_the_call_after_the_confirmations_decided() -> None:
    commits = HeldCommits()
    bench = Bench(commits)
    bench.subscribe(enable_exactly_once_delivery=True)
    bench.publish(b"m")
    session = bench.open()
    assert await is_waiting(session)  # leased: the lease's commit first
    commits.commit()
    [delivery] = deliveries(await step_within(session))
    session.receive(pb.StreamingPullRequest(ack_ids=[delivery.ack_id]))
    session.fail(InvalidArgument("refused"))
    assert session.ending
    session.receive(pb.StreamingPullRequest(ack_ids=["ignored"]))  # nothing more applied
    ending = asyncio.ensure_future(session.next_step())
    await asyncio.sleep(0.01)
    assert not ending.done()  # the confirmation waits for its commit, even now
    commits.commit()
    step = await asyncio.wait_for(ending, 2)
    [confirmation] = protobufs(step)
    assert list(confirmation.acknowledge_confirmation.ack_ids) == [delivery.ack_id]
    assert isinstance(step.end, InvalidArgument)
    session.close()


async def test_the_stream_ack_deadline_may_change_for_later_deliveries() -> None:
    bench = Bench()
    bench.subscribe()
    session = bench.open(stream_ack_deadline_seconds=10)
    session.receive(pb.StreamingPullRequest(stream_ack_deadline_seconds=100))
    bench.publish(b"m")
    [first] = deliveries(await step_within(session))
    bench.clock.advance(50)  # past the first deadline, within the new one
    bench.broker.tick()
    assert await is_waiting(session)  # nothing expired: nothing redelivered
    bench.clock.advance(51)
    bench.broker.tick()
    [again] = deliveries(await step_within(session))
    assert again.message.message_id == first.message.message_id
    assert again.ack_id != first.ack_id
    with pytest.raises(InvalidArgument, match="between 10"):
        session.receive(pb.StreamingPullRequest(stream_ack_deadline_seconds=9))
    session.close()


@pytest.mark.parametrize(("version", "answered"), [(0, False), (1, True)])
async def test_a_keepalive_is_answered_only_under_protocol_version_1(
    version: int, answered: bool
) -> None:
    bench = Bench()
    bench.subscribe(enable_message_ordering=True)
    session = bench.open(protocol_version=version)
    assert await is_waiting(session)
    session.receive(pb.StreamingPullRequest())
    if answered:
        [response] = protobufs(await step_within(session))
        assert not response.received_messages
        assert response.subscription_properties.message_ordering_enabled
    else:
        assert await is_waiting(session)
    session.close()


# ------------------------------------------------------------ confirmations


async def test_confirmations_sort_failures_into_their_lists() -> None:
    bench = Bench()
    bench.subscribe(enable_exactly_once_delivery=True, enable_message_ordering=True)
    first_id, _ = bench.publish(b"a", b"b", key="k")
    bench.publish(b"c")
    session = bench.open()
    got = {d.message.data: d.ack_id for d in deliveries(await step_within(session))}
    assert set(got) == {b"a", b"b", b"c"}
    # a's ack and its modack fail (transiently): b, acked behind a, is unordered.
    bench.broker.acks.inject_failure(SUB, first_id, "TRANSIENT_FAILURE_OTHER", times=2)
    session.receive(
        pb.StreamingPullRequest(
            ack_ids=[got[b"b"], got[b"a"], got[b"c"], "1-2-3", "\x00bad"],
            modify_deadline_ack_ids=[got[b"a"], "9-9-9"],
            modify_deadline_seconds=[20, 20],
        )
    )
    [response] = protobufs(await step_within(session))
    acks = response.acknowledge_confirmation
    assert list(acks.ack_ids) == [got[b"c"]]
    assert list(acks.unordered_ack_ids) == [got[b"b"]]
    assert list(acks.temporary_failed_ack_ids) == [got[b"a"]]
    assert set(acks.invalid_ack_ids) == {"1-2-3", "\x00bad"}
    modacks = response.modify_ack_deadline_confirmation
    assert list(modacks.temporary_failed_ack_ids) == [got[b"a"]]
    assert list(modacks.invalid_ack_ids) == ["9-9-9"]
    assert response.subscription_properties.exactly_once_delivery_enabled
    assert response.subscription_properties.message_ordering_enabled
    session.close()


async def test_no_confirmations_without_exactly_once() -> None:
    bench = Bench()
    bench.subscribe()
    bench.publish(b"m")
    session = bench.open()
    [delivery] = deliveries(await step_within(session))
    session.receive(pb.StreamingPullRequest(ack_ids=[delivery.ack_id, "1-2-3"]))
    assert await is_waiting(session)
    assert bench.broker.backlog(SUB) == 0
    session.close()


async def test_an_expired_ack_id_is_confirmed_invalid() -> None:
    bench = Bench()
    bench.subscribe(enable_exactly_once_delivery=True)
    bench.publish(b"m")
    session = bench.open(stream_ack_deadline_seconds=10)
    [first] = deliveries(await step_within(session))
    bench.clock.advance(11)
    bench.broker.tick()
    [again] = deliveries(await step_within(session))
    session.receive(pb.StreamingPullRequest(ack_ids=[first.ack_id, again.ack_id]))
    [response] = protobufs(await step_within(session))
    assert list(response.acknowledge_confirmation.invalid_ack_ids) == [first.ack_id]
    assert list(response.acknowledge_confirmation.ack_ids) == [again.ack_id]
    session.close()


# ------------------------------------------------------------ commits


async def test_exactly_once_deliveries_and_confirmations_leave_in_order_once_committed() -> None:
    commits = HeldCommits()
    bench = Bench(commits)
    bench.subscribe(enable_exactly_once_delivery=True)
    bench.publish(b"a")
    session = bench.open()
    assert await is_waiting(session)  # leased, but its lease is not committed yet
    commits.commit()
    [a] = deliveries(await step_within(session))
    session.receive(pb.StreamingPullRequest(ack_ids=[a.ack_id]))
    bench.publish(b"b")
    assert await is_waiting(session)
    commits.commit()
    step = await step_within(session)
    assert [type(r) for r in step.responses] == [pb.StreamingPullResponse, DeliveryBatch]
    assert list(protobufs(step)[0].acknowledge_confirmation.ack_ids) == [a.ack_id]
    assert [d.message.data for d in deliveries(step)] == [b"b"]
    session.close()


async def test_a_stream_leases_no_more_than_the_groups_it_may_hold() -> None:
    # Each lease of an exactly-once stream waits for its commit; with MAX_GROUPS_WAITING
    # groups waiting, the stream leases nothing more until a commit is done.
    commits = HeldCommits()
    bench = Bench(commits)
    bench.subscribe(enable_exactly_once_delivery=True)
    session = bench.open()
    for index in range(MAX_GROUPS_WAITING + 2):
        bench.publish(bytes([index]))
        assert await is_waiting(session)
    assert len(commits.waiters) == MAX_GROUPS_WAITING
    commits.commit()
    step = await step_within(session)
    assert [d.message.data for d in deliveries(step)] == [bytes([i]) for i in range(4)]
    assert await is_waiting(session)  # the other two leased now, waiting for their commit
    commits.commit()
    step = await step_within(session)
    assert [d.message.data for d in deliveries(step)] == [bytes([4]), bytes([5])]
    session.close()


async def test_a_failed_commit_ends_the_call_with_its_error() -> None:
    commits = HeldCommits()
    bench = Bench(commits)
    bench.subscribe(enable_exactly_once_delivery=True)
    bench.publish(b"a")
    session = bench.open()
    await is_waiting(session)
    commits.fail(Unavailable("disk full"))
    step = await step_within(session)
    assert not step.responses
    assert isinstance(step.end, Unavailable)
    session.close()


# ------------------------------------------------------------ flow, wake-ups, the end


async def test_flow_control_bounds_what_is_outstanding() -> None:
    bench = Bench()
    bench.subscribe()
    bench.publish(*[b"m"] * 5)
    session = bench.open(max_outstanding_messages=2)
    got = deliveries(await step_within(session))
    assert len(got) == 2
    assert await is_waiting(session)
    session.receive(pb.StreamingPullRequest(ack_ids=[got[0].ack_id]))
    assert len(deliveries(await step_within(session))) == 1
    session.close()


def test_deliveries_are_cut_into_responses_of_bounded_size() -> None:
    bench_broker = Broker(FakeClock())
    bench_broker.topics.create(TopicConfig(TOPIC))
    bench_broker.subscriptions.create(SubscriptionConfig(SUB, TOPIC))
    big = b"x" * (MAX_BYTES_PER_RESPONSE // 2)
    bench_broker.publishing.publish(TOPIC, [NewMessage(big)] * 3)
    bench_broker.publishing.publish(TOPIC, [NewMessage(b"y" * (MAX_BYTES_PER_RESPONSE + 1))])
    leased = bench_broker.leasing.pull(SUB, 10, max_bytes=10 * MAX_BYTES_PER_RESPONSE)
    batches = cut(leased, True, False)
    sizes: list[Sequence[Any]] = [b.deliveries for b in batches if isinstance(b, DeliveryBatch)]
    assert [len(s) for s in sizes] == [2, 1, 1]  # the oversized message goes alone
    assert all(isinstance(b, DeliveryBatch) and b.exactly_once for b in batches)


async def test_news_for_the_subscription_wakes_the_stream() -> None:
    bench = Bench()
    bench.subscribe()
    session = bench.open()
    waiting = asyncio.ensure_future(session.next_step())
    await asyncio.sleep(0.01)
    assert not waiting.done()
    bench.publish(b"m")  # the broker's listener notifies the open streams
    step = await asyncio.wait_for(waiting, 2)
    assert [d.message.data for d in deliveries(step)] == [b"m"]
    session.close()


async def test_a_dropped_stream_ends_with_its_status_and_its_leases_survive() -> None:
    bench = Bench()
    bench.subscribe()
    bench.publish(b"m")
    session = bench.open()
    [delivery] = deliveries(await step_within(session))
    assert bench.streams.drop_all(InjectedStatus("UNAVAILABLE", "dropped")) == 1
    step = await step_within(session)
    assert isinstance(step.end, Unavailable)
    assert step.end.message == "dropped"
    session.close()
    assert bench.streams.count() == 0
    bench.broker.acks.acknowledge(SUB, [delivery.ack_id])  # its lease is still valid
    assert bench.broker.backlog(SUB) == 0


async def test_the_client_half_closing_ends_the_call_once_confirmations_are_out() -> None:
    commits = HeldCommits()
    bench = Bench(commits)
    bench.subscribe(enable_exactly_once_delivery=True)
    bench.publish(b"m")
    session = bench.open()
    assert await is_waiting(session)  # leased: the lease's commit first
    commits.commit()
    [delivery] = deliveries(await step_within(session))
    session.receive(pb.StreamingPullRequest(ack_ids=[delivery.ack_id]))
    session.client_finished()
    assert await is_waiting(session)  # the confirmation's commit first
    commits.commit()
    step = await step_within(session)
    assert len(protobufs(step)) == 1
    assert step.finished
    session.close()


async def test_a_deleted_subscription_ends_the_stream() -> None:
    bench = Bench()
    bench.subscribe()
    session = bench.open()
    bench.broker.subscriptions.delete(SUB)
    with pytest.raises(NotFound):
        await step_within(session)
    session.close()
