"""The asyncio clients' fixtures when pytest-asyncio is not active: each fails the test
that requests it with what to do, instead of pytest's "async fixture not handled"."""

from __future__ import annotations

from typing import NoReturn

import pytest

_MISSING = (
    "{name} is an asyncio client: it needs pytest-asyncio (pip install pytest-asyncio; "
    "then mark the test with @pytest.mark.asyncio, or set asyncio_mode = auto). "
    "pubsub_server, the factories, pubsub_clock and pubsub_faults work without it."
)


def _missing(name: str) -> NoReturn:
    pytest.fail(_MISSING.format(name=name), pytrace=False)


@pytest.fixture
def pubsub_admin() -> NoReturn:
    """eoclient's ``AdminClient`` for ``pubsub_server`` — needs pytest-asyncio."""
    _missing("pubsub_admin")


@pytest.fixture
def pubsub_publisher() -> NoReturn:
    """eoclient's ``PublisherClient`` for ``pubsub_server`` — needs pytest-asyncio."""
    _missing("pubsub_publisher")


@pytest.fixture
def pubsub_subscriber() -> NoReturn:
    """eoclient's ``SubscriberClient`` for ``pubsub_server`` — needs pytest-asyncio."""
    _missing("pubsub_subscriber")
