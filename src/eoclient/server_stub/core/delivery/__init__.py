"""The delivery engine: one subscription's messages from publish to settlement.

Entered only through this façade (``tests/server_stub/core/delivery/test_facade.py``):
``SubscriptionDelivery`` is one subscription's delivery state, and the values its
callers hand it or get back are named here. What is inside — the waiting messages, the
leases, settlement and the rules they follow — is the package's own
(docs/architecture.md#the-delivery-engine).
"""

from eoclient.server_stub.core.delivery.ack_resolution import AckTarget
from eoclient.server_stub.core.delivery.engine import SubscriptionDelivery
from eoclient.server_stub.core.delivery.rules import Forwarder
from eoclient.server_stub.core.delivery.stream_flow import StreamFlow

__all__ = ["AckTarget", "Forwarder", "StreamFlow", "SubscriptionDelivery"]
