"""What the plugin's fixtures hand to a test: the server, its faults, its clock, factories.

Every handle works from any thread and any event loop (or none): the server runs in a
:class:`~eoclient.pytest_plugin.server_thread.ServerThread`, and each handle method runs
its work on the server's loop and returns the result.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from eoclient._clock import FakeClock
from eoclient.admin import AdminClient, Subscription, Topic
from eoclient.errors import NotFound
from eoclient.pytest_plugin.server_thread import ServerThread
from eoclient.server_stub import ReferenceServer
from eoclient.server_stub.core.history import MessageHistory

T = TypeVar("T")

__all__ = [
    "PubSubClock",
    "PubSubFaults",
    "PubSubServer",
    "SubscriptionFactory",
    "TopicFactory",
]


class PubSubClock:
    """The server's clock, moved by hand (``pubsub_clock``).

    Time stands still until :meth:`advance`, which also makes the server act on it at
    once (expire leases, end backoffs): after ``advance(61)`` an unacked message with a
    60 s deadline is deliverable again. Starts at 2026-01-01T00:00:00Z unless told.
    """

    def __init__(self, start: float = FakeClock.DEFAULT_START) -> None:
        self.fake = FakeClock(start)
        self._servers: list[PubSubServer] = []

    def __repr__(self) -> str:
        return f"<PubSubClock now={self.fake.now()}>"

    def now(self) -> float:
        """Seconds since the epoch, on this clock."""
        return self.fake.now()

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (>= 0) and let the server catch up."""
        self.fake.advance(seconds)
        for server in self._servers:
            server.tick()

    def attach(self, server: PubSubServer) -> None:
        self._servers.append(server)


class PubSubFaults:
    """The server's fault injection (``pubsub_faults``, also ``pubsub_server.faults``)."""

    def __init__(self, thread: ServerThread) -> None:
        self._thread = thread

    def fail(self, method: str, code: str, message: str = "", *, times: int = 1) -> None:
        """Make the next ``times`` calls of RPC ``method`` (``"Publish"``, ``"Pull"``,
        ``"Acknowledge"``, ...) fail with status ``code`` (``"UNAVAILABLE"``, ...);
        ``times=-1``: every call, until :meth:`clear`."""
        self._thread.call(lambda server: server.faults.fail(method, code, message, times=times))

    def fail_ack(
        self,
        subscription: str,
        message_id: str,
        reason: str,
        *,
        times: int = 1,
        operations: Iterable[str] = ("ack", "modack"),
    ) -> None:
        """Fail the next ``times`` acks / modacks of one message on an exactly-once
        subscription with an ErrorInfo ``reason`` (``"PERMANENT_FAILURE_OTHER"``,
        ``"TRANSIENT_FAILURE_OTHER"``, ``"PERMANENT_FAILURE_INVALID_ACK_ID"``, ...)."""
        chosen = tuple(operations)
        self._thread.call(
            lambda server: server.inject_ack_failure(
                subscription, message_id, reason, times=times, operations=chosen
            )
        )

    def drop_streams(self, code: str = "UNAVAILABLE", message: str = "") -> int:
        """End every open StreamingPull with ``code``; how many there were."""
        return self._thread.call(lambda server: server.drop_streams(code, message))

    def clear(self) -> None:
        """Forget the planned RPC failures (:meth:`fail`)."""
        self._thread.call(lambda server: server.faults.clear())


class PubSubServer:
    """The reference server of one test (``pubsub_server``).

    Attributes:
        address: ``host:port`` of its gRPC door (what ``PUBSUB_EMULATOR_HOST`` is set to).
        rest_url: ``http://host:port`` of its REST/JSON door (paths start with ``/v1/``).
        project: the test's project id (``pubsub_project``).
        faults: fault injection, see :class:`PubSubFaults`.
    """

    def __init__(self, thread: ServerThread, project: str) -> None:
        self._thread = thread
        self.address = thread.address
        self.rest_url = thread.rest_url
        self.project = project
        self.faults = PubSubFaults(thread)

    def __repr__(self) -> str:
        return f"<PubSubServer {self.address} project={self.project}>"

    def topic_path(self, topic: str) -> str:
        """``topic`` as a full name in the test's project (full names pass through)."""
        return _full(topic, self.project, "topics")

    def subscription_path(self, subscription: str) -> str:
        return _full(subscription, self.project, "subscriptions")

    def snapshot_path(self, snapshot: str) -> str:
        return _full(snapshot, self.project, "snapshots")

    def history(self, subscription: str, message_id: str) -> MessageHistory:
        """A copy of what happened to one message on one subscription so far:
        ``deliveries``, ``acks``, ``modacks``, ``dead_lettered``."""
        name = self.subscription_path(subscription)

        def copy(server: ReferenceServer) -> MessageHistory:
            found = server.history(name, message_id)
            return MessageHistory(
                list(found.deliveries),
                list(found.acks),
                list(found.modacks),
                list(found.dead_lettered),
            )

        return self._thread.call(copy)

    def open_streams(self) -> int:
        """How many StreamingPull calls are open now."""
        return self._thread.call(lambda server: server.open_streams())

    def tick(self) -> None:
        """Process expired leases and backoffs now (``PubSubClock.advance`` does this)."""
        self._thread.call(lambda server: server.tick())

    def call(self, function: Callable[[ReferenceServer], T]) -> T:
        """``function(reference_server)`` on the server's own loop, for anything else
        the ``ReferenceServer`` offers (its broker, ...)."""
        return self._thread.call(function)

    def admin(self, action: Callable[[AdminClient], Any]) -> Any:
        """``await action(admin)`` with an ``AdminClient`` of this server, from sync code:
        ``pubsub_server.admin(lambda a: a.get_topic(name))``."""

        async def run() -> Any:
            async with AdminClient(self.address) as admin:
                return await action(admin)

        return self._thread.run(run)


def _full(name: str, project: str, collection: str) -> str:
    return name if name.startswith("projects/") else f"projects/{project}/{collection}/{name}"


class TopicFactory:
    """``pubsub_topic_factory(name=None, **properties) -> Topic``; deleted after the test.

    ``name``: an id in the test's project or a full name; ``None`` makes one up
    (``topic-1``, ``topic-2``, ...). ``properties``: ``AdminClient.create_topic``'s
    keyword arguments (``labels``, ``message_retention_duration``, ...).
    """

    def __init__(self, server: PubSubServer) -> None:
        self._server = server
        self._numbers = itertools.count(1)
        self.created: list[str] = []

    def __call__(self, name: str | None = None, **properties: Any) -> Topic:
        full = self._server.topic_path(name or f"topic-{next(self._numbers)}")
        topic: Topic = self._server.admin(lambda admin: admin.create_topic(full, **properties))
        self.created.append(topic.name)
        return topic

    def cleanup(self) -> None:
        for name in reversed(self.created):
            self._delete(name)
        self.created.clear()

    def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):  # the test deleted it already
            self._server.admin(lambda admin: admin.delete_topic(name))


class SubscriptionFactory:
    """``pubsub_subscription_factory(topic=None, name=None, **properties) -> Subscription``;
    deleted after the test.

    ``topic``: a ``Topic``, an id or a full name; ``None`` creates a new topic (with
    ``pubsub_topic_factory``). ``name`` as for topics (``subscription-1``, ...).
    ``properties``: ``AdminClient.create_subscription``'s keyword arguments
    (``enable_exactly_once_delivery=True``, ``ack_deadline_seconds=10``, ...).
    """

    def __init__(self, server: PubSubServer, topics: TopicFactory) -> None:
        self._server = server
        self._topics = topics
        self._numbers = itertools.count(1)
        self.created: list[str] = []

    def __call__(
        self, topic: Topic | str | None = None, name: str | None = None, **properties: Any
    ) -> Subscription:
        if topic is None:
            topic = self._topics()
        topic_name = self._server.topic_path(topic.name if isinstance(topic, Topic) else topic)
        full = self._server.subscription_path(name or f"subscription-{next(self._numbers)}")
        subscription: Subscription = self._server.admin(
            lambda admin: admin.create_subscription(full, topic_name, **properties)
        )
        self.created.append(subscription.name)
        return subscription

    def cleanup(self) -> None:
        for name in reversed(self.created):
            self._delete(name)
        self.created.clear()

    def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFound):  # the test deleted it already
            self._server.admin(lambda admin: admin.delete_subscription(name))
