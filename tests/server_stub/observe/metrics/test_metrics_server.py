"""The reference server's /metrics, scraped over HTTP and parsed by prometheus_client.

Scenarios run with eoclient's SDK on a FakeClock (so ages are exact) and with the
official google-cloud-pubsub client (its threads against the in-process server), on the
in-memory store and on SQLite (``data_dir=``) across a restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from google.cloud import pubsub_v1
from google.cloud.pubsub_v1.subscriber.message import Message as OfficialMessage

import eoclient
from eoclient._clock import FakeClock
from eoclient._proto import pubsub_pb2 as pb
from eoclient.admin import DeadLetterPolicy
from eoclient.server_stub import run_server
from eoclient.server_stub.server import ReferenceServer

from .support import Scrape, scrape

PROJECT = "projects/metrics-project"
TOPIC = f"{PROJECT}/topics/orders"
SUB = f"{PROJECT}/subscriptions/orders-eod"
DLT = f"{PROJECT}/topics/orders-dead"
DL_SUB = f"{PROJECT}/subscriptions/orders-dl"
INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"
WAIT = 10.0


def request_bytes(topic: str, *datas: bytes) -> int:
    """What the door counts for one Publish: the request's serialized size."""
    return pb.PublishRequest(
        topic=topic, messages=[pb.PubsubMessage(data=d) for d in datas]
    ).ByteSize()


async def eventually(srv: ReferenceServer, check: Callable[[Scrape], bool]) -> Scrape:
    """Scrape until ``check`` holds (the official client's threads act in their time)."""
    deadline = time.monotonic() + WAIT
    while True:
        metrics = await scrape(srv)
        if check(metrics):
            return metrics
        assert time.monotonic() < deadline, metrics.text
        await asyncio.sleep(0.05)


async def handed_over(received: list[OfficialMessage], count: int) -> None:
    """Wait until the official client has called back with ``count`` messages: the server
    counts a message sent when it writes it, and the client's callback runs later, in its
    own thread pool."""
    deadline = time.monotonic() + WAIT
    while len(received) < count:
        assert time.monotonic() < deadline, f"{len(received)} of {count} messages called back"
        await asyncio.sleep(0.02)


def sub_value(metrics: Scrape, name: str, sub: str = SUB, **labels: str) -> float:
    return metrics.subscription(name, sub, TOPIC, **labels)


async def test_the_sdk_scenario_reads_exact_values_and_labels() -> None:
    clock = FakeClock()
    async with run_server(clock=clock) as srv:
        async with eoclient.AdminClient(srv.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_topic(DLT)
            await admin.create_subscription(
                SUB, TOPIC, enable_exactly_once_delivery=True, ack_deadline_seconds=30
            )
            await admin.create_subscription(
                DL_SUB, TOPIC, dead_letter_policy=DeadLetterPolicy(DLT, 5)
            )
        async with eoclient.PublisherClient(srv.address) as publisher:
            for data in (b"one", b"two", b"three"):
                await publisher.publish(TOPIC, data)  # one request each (awaited in turn)
        clock.advance(7)

        metrics = await scrape(srv)
        assert metrics.types["pubsub_subscription_num_undelivered_messages"] == "gauge"
        assert metrics.types["pubsub_subscription_ack_message_count"] == "counter"
        assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 3
        assert sub_value(metrics, "pubsub_subscription_backlog_bytes") == 3 + 3 + 5
        assert sub_value(metrics, "pubsub_subscription_oldest_unacked_message_age_seconds") == 7
        assert metrics.value("pubsub_topic_send_request_count_total", topic=TOPIC) == 3
        assert metrics.value("pubsub_topic_send_message_operation_count_total", topic=TOPIC) == 3
        assert metrics.value("pubsub_topic_byte_cost_total", topic=TOPIC) == sum(
            request_bytes(TOPIC, d) for d in (b"one", b"two", b"three")
        )
        assert metrics.value("pubsub_topic_send_request_count_total", topic=DLT) == 0

        async with eoclient.SubscriberClient(srv.address) as client:
            messages = await client.pull(SUB, 3)
            by_data = {m.data: m for m in messages}
            assert sorted(by_data) == [b"one", b"three", b"two"]
            ok = eoclient.AcknowledgeStatus.SUCCESS
            assert await by_data[b"one"].ack_with_response() is ok
            assert await by_data[b"two"].modify_ack_deadline_with_response(60) is ok
            assert await by_data[b"three"].nack_with_response() is ok
            # The acked delivery's id again: INVALID_ACK_ID, an exactly-once warning.
            results = await client.acknowledge(SUB, [by_data[b"one"].ack_id])
            assert results[by_data[b"one"].ack_id].status is (
                eoclient.AcknowledgeStatus.INVALID_ACK_ID
            )
            metrics = await scrape(srv)
            assert sub_value(metrics, "pubsub_subscription_sent_message_count_total") == 3
            assert sub_value(metrics, "pubsub_subscription_ack_message_count_total") == 1
            assert (
                sub_value(metrics, "pubsub_subscription_mod_ack_deadline_message_count_total") == 1
            )
            assert sub_value(metrics, "pubsub_subscription_nack_requests_total") == 1
            assert sub_value(metrics, "pubsub_subscription_num_outstanding_messages") == 1
            assert metrics.of("pubsub_subscription_exactly_once_warning_count_total") == {
                (
                    ("operation_type", "ack"),
                    ("reason", INVALID),
                    ("subscription", SUB),
                    ("topic", TOPIC),
                ): 1
            }

            # "two" was extended to 60 s: let that deadline pass.
            clock.advance(61)
            srv.tick()
            metrics = await scrape(srv)
            assert sub_value(metrics, "pubsub_subscription_expired_ack_deadlines_count_total") == 1
            assert sub_value(metrics, "pubsub_subscription_num_outstanding_messages") == 0
            assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 2
            assert sub_value(metrics, "pubsub_subscription_oldest_unacked_message_age_seconds") == (
                68
            )

            # The dead-letter subscription: five failed attempts, then the dead-letter topic.
            for _ in range(5):
                [message] = await client.pull(DL_SUB, 1)
                await message.nack_with_response()
            metrics = await scrape(srv)
            assert (
                sub_value(metrics, "pubsub_subscription_dead_letter_message_count_total", DL_SUB)
                == 1
            )
            assert sub_value(metrics, "pubsub_subscription_nack_requests_total", DL_SUB) == 5
            assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages", DL_SUB) == 2


async def test_a_scrape_takes_nothing_from_subscribers() -> None:
    clock = FakeClock()
    async with run_server(clock=clock) as srv:
        async with eoclient.AdminClient(srv.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(SUB, TOPIC, ack_deadline_seconds=10)
        async with eoclient.PublisherClient(srv.address) as publisher:
            await publisher.publish(TOPIC, b"still here")
        for _ in range(3):
            metrics = await scrape(srv)
        assert sub_value(metrics, "pubsub_subscription_sent_message_count_total") == 0
        assert sub_value(metrics, "pubsub_subscription_num_outstanding_messages") == 0
        async with eoclient.SubscriberClient(srv.address) as client:
            [message] = await client.pull(SUB)
            assert message.data == b"still here"
            assert srv.history(SUB, message.message_id).deliveries[0].via == "pull"
        assert len(srv.history(SUB, message.message_id).deliveries) == 1


async def test_backlog_and_age_come_back_from_the_durable_store(tmp_path: Path) -> None:
    clock = FakeClock()
    async with run_server(clock=clock, data_dir=tmp_path) as srv:
        async with eoclient.AdminClient(srv.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(SUB, TOPIC)
        async with eoclient.PublisherClient(srv.address) as publisher:
            await publisher.publish(TOPIC, b"first")
            clock.advance(100)
            for n in range(4):
                await publisher.publish(TOPIC, b"later-%d" % n)
        metrics = await scrape(srv)
        assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 5
    clock.advance(20)
    async with run_server(clock=clock, data_dir=tmp_path) as srv:  # every row is cold now
        for _ in range(2):
            metrics = await scrape(srv)
            assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 5
            assert sub_value(metrics, "pubsub_subscription_backlog_bytes") == 5 + 4 * 7
            assert (
                sub_value(metrics, "pubsub_subscription_oldest_unacked_message_age_seconds") == 120
            )
            # Counters start again with the process; the backlog does not.
            assert metrics.value("pubsub_topic_send_request_count_total", topic=TOPIC) == 0
        async with eoclient.SubscriberClient(srv.address) as client:
            messages = await client.pull(SUB, 10)
            assert sorted(m.data for m in messages)[0] == b"first"
            assert len(messages) == 5
            await asyncio.gather(*(m.ack_with_response() for m in messages))
        metrics = await scrape(srv)
        assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 0
        assert sub_value(metrics, "pubsub_subscription_oldest_unacked_message_age_seconds") == 0
        assert sub_value(metrics, "pubsub_subscription_ack_message_count_total") == 5


@pytest.mark.timeout(60)
async def test_the_official_client_streaming_pull(monkeypatch: pytest.MonkeyPatch) -> None:
    async with run_server() as srv:
        monkeypatch.setenv("PUBSUB_EMULATOR_HOST", srv.address)
        async with eoclient.AdminClient(srv.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(SUB, TOPIC)
        publisher = pubsub_v1.PublisherClient()
        try:
            for data in (b"a", b"b"):
                await asyncio.to_thread(lambda d=data: publisher.publish(TOPIC, d).result(WAIT))
        finally:
            publisher.stop()
            publisher.transport.close()
        metrics = await scrape(srv)
        assert metrics.value("pubsub_topic_send_request_count_total", topic=TOPIC) == 2
        assert metrics.value("pubsub_topic_byte_cost_total", topic=TOPIC) == 2 * request_bytes(
            TOPIC, b"a"
        )

        received: list[OfficialMessage] = []
        subscriber = pubsub_v1.SubscriberClient()
        future = subscriber.subscribe(
            SUB,
            received.append,  # held, not acked: the stream's flow control fills up
            flow_control=pubsub_v1.types.FlowControl(max_messages=1),
        )
        try:
            full = "suspended_max_outstanding_messages_exceeded"
            metrics = await eventually(
                srv,
                lambda m: (
                    m.of("pubsub_subscription_open_streaming_pulls")
                    == {(("status", full), ("subscription", SUB), ("topic", TOPIC)): 1}
                ),
            )
            assert sub_value(metrics, "pubsub_subscription_num_outstanding_messages") == 1
            assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 2
            await handed_over(received, 1)
            received[0].ack()
            await eventually(
                srv, lambda m: sub_value(m, "pubsub_subscription_sent_message_count_total") == 2
            )
            await handed_over(received, 2)
            received[1].ack()
            metrics = await eventually(
                srv, lambda m: sub_value(m, "pubsub_subscription_ack_message_count_total") == 2
            )
            assert sub_value(metrics, "pubsub_subscription_num_undelivered_messages") == 0
        finally:
            future.cancel()
            await asyncio.to_thread(future.result, WAIT)
            await asyncio.to_thread(subscriber.close)
        metrics = await eventually(
            srv, lambda m: m.of("pubsub_subscription_open_streaming_pulls") == {}
        )
        assert [m.data for m in received] == [b"a", b"b"]
