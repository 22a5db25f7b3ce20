"""Helpers shared by the subscriber integration tests (``test_session_*.py``).

No tests here. The integration tests run ``SubscriberClient`` against the reference
server in-process (``run_server()``, 127.0.0.1 port 0, real clock) and check what the
server saw through ``srv.history``. They poll with deadlines (:func:`eventually`)
instead of sleeping for fixed times.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from eoclient.server_stub.core import NewMessage, SubscriptionConfig, TopicConfig
from eoclient.server_stub.core.history import MessageHistory
from eoclient.server_stub.server import ReferenceServer
from eoclient.subscriber.message import Message
from eoclient.subscriber.session import StreamingSession

PROJECT = "eo-tests"
_names = itertools.count(1)


@dataclass
class Env:
    """One topic and one subscription on a reference server."""

    srv: ReferenceServer
    topic: str
    subscription: str

    def publish(self, count: int, *, prefix: str = "m", ordering_key: str = "") -> list[str]:
        """Publish ``count`` messages ``{prefix}-{i}``; returns their ids in order."""
        ids: list[str] = []
        for start in range(0, count, 1000):  # the server takes 1000 per request
            ids += self.srv.broker.publishing.publish(
                self.topic,
                [
                    NewMessage(data=f"{prefix}-{i}".encode(), ordering_key=ordering_key)
                    for i in range(start, min(count, start + 1000))
                ],
            )
        return ids

    def history(self, message_id: str) -> MessageHistory:
        return self.srv.history(self.subscription, message_id)

    def backlog(self) -> int:
        return self.srv.broker.backlog(self.subscription)


def make_env(srv: ReferenceServer, *, exactly_once: bool = True, ordered: bool = False) -> Env:
    n = next(_names)
    topic = f"projects/{PROJECT}/topics/topic-{n}"
    subscription = f"projects/{PROJECT}/subscriptions/sub-{n}"
    srv.broker.topics.create(TopicConfig(topic))
    srv.broker.subscriptions.create(
        SubscriptionConfig(
            subscription,
            topic,
            enable_exactly_once_delivery=exactly_once,
            enable_message_ordering=ordered,
        )
    )
    return Env(srv, topic, subscription)


async def eventually(
    predicate: Callable[[], bool], *, timeout: float = 5.0, what: str = "condition"
) -> None:
    """Wait until ``predicate()`` holds, polling; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout} s"
        await asyncio.sleep(0.01)


async def take(stream: StreamingSession, count: int, *, timeout: float = 5.0) -> list[Message]:
    """The next ``count`` messages of ``stream`` (fails after ``timeout`` seconds)."""
    messages: list[Message] = []
    async with asyncio.timeout(timeout):
        while len(messages) < count:
            messages.append(await anext(stream))
    return messages


async def nothing_within(stream: AsyncIterator[Message], seconds: float = 0.2) -> None:
    """Assert that ``stream`` hands out nothing for ``seconds`` (a bounded negative check).

    ``anext`` is run as a task and cancelled on timeout; the session's ``__anext__``
    only waits on an event, so cancelling it loses no message.
    """
    getter = asyncio.ensure_future(anext(stream))
    done, _ = await asyncio.wait({getter}, timeout=seconds)
    if getter in done:
        raise AssertionError(f"unexpected message: {getter.result()!r}")
    getter.cancel()
    await asyncio.gather(getter, return_exceptions=True)


def _server_side(task: asyncio.Task[object]) -> bool:
    """A task of the in-process reference server (grpc.aio's or the servicer's)."""
    coro = task.get_coro()
    name = getattr(coro, "__qualname__", "")
    code = getattr(coro, "cr_code", None)
    filename = code.co_filename if code is not None else ""
    return (
        name.startswith("AioServer.")
        or "server_stub" in filename
        or "_cygrpc" in filename
        or "aiohttp" in filename  # the REST door; the subscriber does not use aiohttp
    )


def leftover_tasks(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """Client-side tasks alive now that were not alive at ``before`` (nor the current one).

    The reference server runs in the same loop; its tasks are not the client's.
    """
    current = asyncio.current_task()
    return {
        t
        for t in asyncio.all_tasks()
        if not t.done() and t not in before and t is not current and not _server_side(t)
    }


def data_of(message: Message) -> str:
    return message.data.decode()
