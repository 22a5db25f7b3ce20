"""The asyncio clients' fixtures, registered when pytest-asyncio is active.

Each client is opened in the test's event loop (pytest-asyncio's fixture loop) and
closed after the test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest_asyncio

from eoclient.admin import AdminClient
from eoclient.publisher import PublisherClient
from eoclient.subscriber import SubscriberClient

if TYPE_CHECKING:
    # Registered in every run with pytest-asyncio, server extra or not: the server's
    # modules are imported only by a test that asks for pubsub_server.
    from eoclient.pytest_plugin.handles import PubSubServer


@pytest_asyncio.fixture
async def pubsub_admin(pubsub_server: PubSubServer) -> AsyncIterator[AdminClient]:
    """An eoclient ``AdminClient`` connected to ``pubsub_server`` (needs pytest-asyncio)."""
    async with AdminClient(pubsub_server.address) as admin:
        yield admin


@pytest_asyncio.fixture
async def pubsub_publisher(pubsub_server: PubSubServer) -> AsyncIterator[PublisherClient]:
    """An eoclient ``PublisherClient`` (ordering keys allowed) connected to
    ``pubsub_server``; closed, after sending what it holds, after the test."""
    async with PublisherClient(pubsub_server.address, enable_message_ordering=True) as client:
        yield client


@pytest_asyncio.fixture
async def pubsub_subscriber(pubsub_server: PubSubServer) -> AsyncIterator[SubscriberClient]:
    """An eoclient ``SubscriberClient`` connected to ``pubsub_server`` (needs pytest-asyncio)."""
    async with SubscriberClient(pubsub_server.address) as client:
        yield client
