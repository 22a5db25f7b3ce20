"""Closing a SubscriberClient closes the sessions it opened first."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from eoclient.server_stub import ReferenceServer, run_server
from eoclient.subscriber import ShutdownBehavior, ShutdownOptions, SubscriberClient
from eoclient.subscriber.session import SessionState

from .test_session_support import eventually, make_env


@pytest.fixture
async def srv() -> AsyncIterator[ReferenceServer]:
    async with run_server() as server:
        yield server


async def test_closing_the_client_closes_its_open_sessions_and_gives_messages_back(
    srv: ReferenceServer,
) -> None:
    env = make_env(srv)
    env.publish(3)
    client = SubscriberClient(srv.address)
    session = client.subscribe(
        env.subscription,
        shutdown=ShutdownOptions(ShutdownBehavior.NACK_IMMEDIATELY, timeout=1),
    )
    await session.__aenter__()
    first = await anext(session)
    await client.aclose()
    assert session.state is SessionState.CLOSED
    assert first.settled == "nack"
    # What the session held goes back to the server at once: a new subscriber gets all 3.
    async with SubscriberClient(srv.address) as again, again.subscribe(env.subscription) as stream:
        seen = set()
        async for message in stream:
            seen.add(message.message_id)
            await message.ack_with_response()
            if len(seen) == 3:
                break
    await eventually(lambda: env.backlog() == 0)
