"""A window past its growth cap still loads the messages back from leases.

A bounded window (``Backlog``, a durable store's) grows past its size, up to twice it plus
what a Pull wants, only while what it holds cannot be delivered: an ordering key's
messages behind a head that is leased, or back from a lease with its body in the store
only (returned). Past that cap a load used to bring nothing, returned messages included:
when the heads the window's messages wait behind were among them, nothing could ever be
delivered again and the subscription stalled with a backlog.
"""

from __future__ import annotations

import random
from pathlib import Path

from eoclient._clock import FakeClock
from eoclient.server_stub.core import Broker, NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.storage.sqlite import SqliteStore

TOPIC = "projects/p1/topics/heads"
SUB = "projects/p1/subscriptions/heads"


def test_a_window_full_of_messages_behind_returned_heads_drains(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path, window=3, gc_interval=0)
    try:
        clock = FakeClock()
        broker = Broker(clock, store=store, rng=random.Random(7), record_history=False)
        broker.topics.create(TopicConfig(TOPIC))
        broker.subscriptions.create(
            SubscriptionConfig(
                SUB,
                TOPIC,
                ack_deadline_seconds=10,
                enable_message_ordering=True,
                enable_exactly_once_delivery=True,
            )
        )
        broker.publishing.publish(TOPIC, [NewMessage(b"a"), NewMessage(b"b")])
        for _ in range(2):
            broker.publishing.publish(
                TOPIC, [NewMessage(b"k", ordering_key="k1") for _ in range(12)]
            )
        # Acks newest first fail for all but a key's first unacked message (exactly-once
        # with ordering keys); 11 s later the other leases have expired (10 s): their
        # messages come back, the key's later ones with them, and the window outgrows its
        # cap (2 x 3 + 10) with messages of k1 behind heads only the store holds.
        grew = False
        for _ in range(100):
            clock.advance(11)
            pulled = broker.leasing.pull(SUB, 10)
            window = broker.delivery_state(SUB).waiting.window
            grew = grew or len(window.entries) >= 2 * 3 + 10
            if not pulled and not broker.backlog(SUB):
                break
            if pulled:  # newest first: an ack before its key's earlier ones fails
                broker.acks.acknowledge(SUB, [d.ack_id for d in reversed(pulled)])
        assert grew
        assert broker.backlog(SUB) == 0
    finally:
        store.close()
