"""The SDK's own counters: a streaming session's ack results, next to the server's view.

``stream.statistics()`` counts each ack once, by its final AcknowledgeStatus; the
server's ``exactly_once_warning_count`` counts the same failure from its side.
"""

from __future__ import annotations

import eoclient
from eoclient.server_stub import run_server

from .support import scrape

TOPIC = "projects/stats-project/topics/jobs"
SUB = "projects/stats-project/subscriptions/jobs-eod"
INVALID = "PERMANENT_FAILURE_INVALID_ACK_ID"


async def test_a_sessions_ack_results_match_the_servers_counts() -> None:
    async with run_server() as srv:
        async with eoclient.AdminClient(srv.address) as admin:
            await admin.create_topic(TOPIC)
            await admin.create_subscription(SUB, TOPIC, enable_exactly_once_delivery=True)
        async with eoclient.PublisherClient(srv.address) as publisher:
            doomed = await publisher.publish(TOPIC, b"doomed")
            await publisher.publish(TOPIC, b"fine")
        srv.inject_ack_failure(SUB, doomed, INVALID, operations=("ack",))
        statuses = {}
        async with (
            eoclient.SubscriberClient(srv.address) as client,
            client.subscribe(SUB) as stream,
        ):
            async for message in stream:
                statuses[message.data] = await message.ack_with_response()
                if len(statuses) == 2:
                    break
            stats = stream.statistics()
        assert statuses == {
            b"doomed": eoclient.AcknowledgeStatus.INVALID_ACK_ID,
            b"fine": eoclient.AcknowledgeStatus.SUCCESS,
        }
        assert stats.ack_results == {"SUCCESS": 1, "INVALID_ACK_ID": 1}
        assert (stats.received, stats.acked) == (2, 2)
        metrics = await scrape(srv)
        assert (
            metrics.subscription(
                "pubsub_subscription_exactly_once_warning_count_total",
                SUB,
                TOPIC,
                operation_type="ack",
                reason=INVALID,
            )
            == 1
        )
        assert metrics.subscription("pubsub_subscription_ack_message_count_total", SUB, TOPIC) == 1
