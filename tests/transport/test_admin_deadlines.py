"""An admin call's timeout reaches the server as the call's deadline, and a server slower
than it ends the call with DEADLINE_EXCEEDED — once: the budget is spent, so even a read,
whose DEADLINE_EXCEEDED is retried, is not sent again."""

from __future__ import annotations

import pytest

from eoclient import Endpoint
from eoclient.admin import AdminClient, topic_path
from eoclient.errors import DeadlineExceeded

from .recording_server import recording_server

pytestmark = pytest.mark.timeout(20)
TOPIC = topic_path("p", "t")


async def test_the_timeout_is_the_deadline_the_server_sees() -> None:
    async with (
        recording_server(None) as server,
        AdminClient(Endpoint.insecure(server.address), timeout=30) as admin,
    ):
        await admin.get_topic(TOPIC)
        await admin.get_topic(TOPIC, timeout=5)
        await admin.get_topic(TOPIC, timeout=None)
    by_default, per_call, no_deadline = (seen.time_remaining for seen in server.calls)
    # The grpc-timeout header rounds to its unit: allow a little above the value.
    assert by_default is not None
    assert 20 < by_default < 30.5
    assert per_call is not None
    assert 3 < per_call < 5.5
    assert no_deadline is None or no_deadline > 10**6  # gRPC reports "none" as far away


async def test_a_slower_server_ends_the_call_once_the_budget_is_spent() -> None:
    async with recording_server(None) as server:
        server.hold = 5.0
        async with AdminClient(Endpoint.insecure(server.address)) as admin:
            with pytest.raises(DeadlineExceeded):
                await admin.get_topic(TOPIC, timeout=0.3)
    assert len(server.calls) == 1
