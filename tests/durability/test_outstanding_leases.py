"""A durable server leases as many messages as its lease limit allows, whatever the size
of the window it keeps in memory: 60,000 outstanding leases of 100-byte messages over
unary Pulls, then RESOURCE_EXHAUSTED at ``--max-leases`` (the window is 10,000 messages;
leases used to count against it and leasing stopped at about 21,000)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eoclient._proto import pubsub_pb2
from eoclient._transport import Endpoint, PubSubTransport, create_channel
from eoclient.errors import ResourceExhausted
from eoclient.server_stub.server import run_server
from eoclient.server_stub.storage.sqlite import DEFAULT_WINDOW

TOPIC = "projects/leases/topics/work"
SUB = "projects/leases/subscriptions/work"
LIMIT = 60_000

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
async def test_sixty_thousand_outstanding_leases_on_a_durable_server(tmp_path: Path) -> None:
    assert LIMIT > 2 * DEFAULT_WINDOW + 1000  # beyond where leasing used to stop
    async with run_server(
        data_dir=tmp_path / "data", rest_port=None, record_history=False, max_leases=LIMIT
    ) as server:
        transport = PubSubTransport(create_channel(Endpoint.resolve(server.address)))
        try:
            await transport.call(
                "Publisher", "CreateTopic", pubsub_pb2.Topic(name=TOPIC), pubsub_pb2.Topic
            )
            subscription = pubsub_pb2.Subscription(
                name=SUB, topic=TOPIC, ack_deadline_seconds=600, enable_exactly_once_delivery=True
            )
            await transport.call(
                "Subscriber", "CreateSubscription", subscription, pubsub_pb2.Subscription
            )
            batch = [pubsub_pb2.PubsubMessage(data=b"x" * 100) for _ in range(1000)]
            for _ in range(LIMIT // 1000 + 1):
                await transport.publish(TOPIC, batch)
            ack_ids: list[str] = []
            while len(ack_ids) < LIMIT:
                response = await transport.pull(SUB, 1000)
                assert len(response.received_messages) == 1000, len(ack_ids)
                ack_ids += [m.ack_id for m in response.received_messages]
            assert len(set(ack_ids)) == LIMIT
            assert server.broker.delivery_state(SUB).reads.leased() == LIMIT
            with pytest.raises(ResourceExhausted, match=f"--max-leases {LIMIT}"):
                await transport.pull(SUB, 1000)
            # Room comes back with acks; the last thousand are still waiting.
            await transport.acknowledge(SUB, ack_ids[:10])
            response = await transport.pull(SUB, 1000)
            assert len(response.received_messages) == 10
            assert server.broker.backlog(SUB) == LIMIT + 1000 - 10
        finally:
            await transport.close()
