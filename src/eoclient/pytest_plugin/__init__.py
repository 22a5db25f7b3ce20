"""eoclient's pytest plugin: a Pub/Sub server per test, and fixtures around it.

Installed with eoclient (the ``pytest11`` entry point ``eoclient``); nothing to import::

    def test_orders_are_billed(pubsub_subscription_factory):
        billing = pubsub_subscription_factory(enable_exactly_once_delivery=True)
        # PUBSUB_EMULATOR_HOST is set: the application finds the server
        run_my_app(topic=billing.topic, subscription=billing.name)

Fixtures (all function-scoped; nothing is shared between tests):

* ``pubsub_server`` — the reference server on 127.0.0.1, a free port, fresh state;
  ``PUBSUB_EMULATOR_HOST`` and ``PUBSUB_PROJECT_ID`` are set for the test, so the
  official ``google-cloud-pubsub`` clients, eoclient's and your app find it. A
  :class:`~eoclient.pytest_plugin.handles.PubSubServer`: ``address``, ``faults``,
  ``history(sub, message_id)``, ``topic_path(id)``, ...
* ``pubsub_project`` — the project id (``"test-project"``; override the fixture to change).
* ``pubsub_topic_factory`` / ``pubsub_subscription_factory`` — create topics and
  subscriptions (``AdminClient``'s keyword arguments); deleted after the test.
* ``pubsub_clock`` — request it and the server runs on a clock that moves only when
  the test says: ``pubsub_clock.advance(61)`` (leases expire, backoffs end, at once).
* ``pubsub_faults`` — fault injection: ``fail("Acknowledge", "UNAVAILABLE", times=2)``,
  ``fail_ack(sub, message_id, "PERMANENT_FAILURE_OTHER")``, ``drop_streams()``.
* ``pubsub_admin`` / ``pubsub_publisher`` / ``pubsub_subscriber`` — eoclient's asyncio
  clients, connected to the server and closed after the test. These three need
  pytest-asyncio (their tests are ``async def``); without it they fail with a message
  that says so.

The server runs in a thread of its own with its own event loop, so everything above
except the three asyncio clients works in plain ``def`` tests, in ``async def`` tests,
and without any asyncio plugin.

The server needs ``pip install 'eoclient[server]'``. The plugin is loaded in every
project that installs eoclient, so it never needs the extra to load: without it, the
tests that ask for ``pubsub_server`` (or a fixture built on it) fail with one line
saying so, and every other test runs as if the plugin were not there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

from eoclient._extras import install_hint

if TYPE_CHECKING:
    from eoclient.pytest_plugin.handles import (
        PubSubClock,
        PubSubFaults,
        PubSubServer,
        SubscriptionFactory,
        TopicFactory,
    )
    from eoclient.pytest_plugin.server_thread import ServerThread

__all__ = [
    "PubSubClock",
    "PubSubFaults",
    "PubSubServer",
    "ServerThread",
    "SubscriptionFactory",
    "TopicFactory",
]

DEFAULT_PROJECT = "test-project"
EMULATOR_HOST_ENV = "PUBSUB_EMULATOR_HOST"
PROJECT_ENV = "PUBSUB_PROJECT_ID"


def __getattr__(name: str) -> Any:
    # pytest imports this module in every run of every project that has eoclient
    # installed: the server (aiohttp, ...) is imported only when a test uses it.
    if name == "ServerThread":
        from eoclient.pytest_plugin.server_thread import ServerThread

        return ServerThread
    if name in {
        "PubSubClock",
        "PubSubFaults",
        "PubSubServer",
        "SubscriptionFactory",
        "TopicFactory",
    }:
        from eoclient.pytest_plugin import handles

        return getattr(handles, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pytest_configure(config: pytest.Config) -> None:
    # The asyncio clients' fixtures exist in two forms: real ones when pytest-asyncio is
    # active, and ones that explain what is missing when it is not.
    if config.pluginmanager.hasplugin("asyncio"):
        from eoclient.pytest_plugin import _asyncio_fixtures as fixtures
    else:
        from eoclient.pytest_plugin import _no_asyncio_fixtures as fixtures  # type: ignore[no-redef]
    config.pluginmanager.register(fixtures, "eoclient-asyncio-clients")


@pytest.fixture
def pubsub_project() -> str:
    """The project id of the test's resources (``PUBSUB_PROJECT_ID`` during the test)."""
    return DEFAULT_PROJECT


@pytest.fixture
def pubsub_clock() -> PubSubClock:
    """A hand-moved clock for the server: request it and ``pubsub_server`` runs on it."""
    _require_server("pubsub_clock")
    from eoclient.pytest_plugin.handles import PubSubClock

    return PubSubClock()


@pytest.fixture
def pubsub_server(
    request: pytest.FixtureRequest, pubsub_project: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[PubSubServer]:
    """The reference server for this test (fresh state, a free port); sets
    ``PUBSUB_EMULATOR_HOST`` and ``PUBSUB_PROJECT_ID`` while the test runs."""
    _require_server("pubsub_server")
    from eoclient.pytest_plugin.handles import PubSubServer
    from eoclient.pytest_plugin.server_thread import ServerThread

    clock: PubSubClock | None = None
    if "pubsub_clock" in request.fixturenames:
        clock = request.getfixturevalue("pubsub_clock")
    with ServerThread(clock=clock.fake if clock is not None else None) as thread:
        server = PubSubServer(thread, pubsub_project)
        if clock is not None:
            clock.attach(server)
        monkeypatch.setenv(EMULATOR_HOST_ENV, server.address)
        monkeypatch.setenv(PROJECT_ENV, pubsub_project)
        yield server


@pytest.fixture
def pubsub_faults(pubsub_server: PubSubServer) -> PubSubFaults:
    """The server's fault injection: ``fail``, ``fail_ack``, ``drop_streams``, ``clear``."""
    return pubsub_server.faults


@pytest.fixture
def pubsub_topic_factory(pubsub_server: PubSubServer) -> Iterator[TopicFactory]:
    """``pubsub_topic_factory(name=None, **properties) -> Topic``; deleted after the test."""
    from eoclient.pytest_plugin.handles import TopicFactory

    factory = TopicFactory(pubsub_server)
    yield factory
    factory.cleanup()


@pytest.fixture
def pubsub_subscription_factory(
    pubsub_server: PubSubServer, pubsub_topic_factory: TopicFactory
) -> Iterator[SubscriptionFactory]:
    """``pubsub_subscription_factory(topic=None, name=None, **properties) -> Subscription``
    (a new topic when none is given); deleted after the test."""
    from eoclient.pytest_plugin.handles import SubscriptionFactory

    factory = SubscriptionFactory(pubsub_server, pubsub_topic_factory)
    yield factory
    factory.cleanup()


def _require_server(fixture: str) -> None:
    """Fail the test with one line when the server extra is not installed."""
    hint = install_hint("server", f"{fixture} (eoclient's pytest plugin)")
    if hint is not None:
        pytest.fail(hint, pytrace=False)
