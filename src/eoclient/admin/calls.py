"""What one admin RPC is, how it is made, and how a paged list is read.

Every part of the admin API (topics and subscriptions in :mod:`~eoclient.admin.client`,
schemas, IAM policies, the broker-policy extension) builds a :class:`Request` and hands it
to :meth:`AdminCalls._call`; list calls hand a request builder to
:meth:`AdminCalls._pager`. Those parts import this module and nothing of each other, so
the admin package has no import cycle.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import Message

from eoclient._transport import PubSubTransport

__all__ = ["AdminCalls", "AsyncPager", "Request"]

T = TypeVar("T")
ResponseT = TypeVar("ResponseT", bound=Message)


@dataclass(frozen=True, slots=True)
class Request(Generic[ResponseT]):
    """One call, ready for ``PubSubTransport.call``."""

    # "Publisher", "Subscriber", "SchemaService" (google.pubsub.v1's), or a full service
    # name: "google.iam.v1.IAMPolicy", "eoclient.broker.v1.BrokerPolicies".
    service: str
    method: str
    message: Message
    response: type[ResponseT]
    routing: tuple[str, str]  # x-goog-request-params: (request field, resource name)


class AsyncPager(Generic[T]):
    """The items of a paged list call, fetched one page at a time as they are consumed.

    ``async for item in pager`` yields items; ``async for page in pager.pages()``
    yields each page's items as a list; ``await pager.collect()`` returns all items.
    Nothing is requested until iteration starts, and every iteration starts again
    from the first page. Errors (e.g. ``NotFound``) surface on the first ``async for``.
    """

    def __init__(self, fetch: Callable[[str], Awaitable[tuple[list[T], str]]]) -> None:
        self._fetch = fetch

    def __aiter__(self) -> AsyncIterator[T]:
        return self._items()

    async def _items(self) -> AsyncIterator[T]:
        async for page in self.pages():
            for item in page:
                yield item

    async def pages(self) -> AsyncIterator[list[T]]:
        token = ""
        while True:
            items, token = await self._fetch(token)
            yield items
            if not token:
                return

    async def collect(self) -> list[T]:
        return [item async for item in self]


class AdminCalls:
    """The call machinery every part of ``AdminClient`` uses (its base class).

    The client supplies the transport (:meth:`_get_transport`) and the deadline.
    """

    _timeout: float | None

    def _get_transport(self) -> PubSubTransport:  # pragma: no cover - AdminClient's
        raise NotImplementedError

    async def _call(self, request: Request[ResponseT]) -> ResponseT:
        return await self._get_transport().call(
            request.service,
            request.method,
            request.message,
            request.response,
            routing=request.routing,
            timeout=self._timeout,
        )

    def _pager(
        self,
        build: Callable[[str, int, str], Request[ResponseT]],
        parse: Callable[[ResponseT], tuple[list[T], str]],
        parent: str,
        page_size: int | None,
    ) -> AsyncPager[T]:
        """Pages of ``build(parent, page_size, token)``'s answers, read by ``parse``."""
        if page_size is not None and page_size <= 0:
            raise ValueError(
                f"page_size must be > 0 (None = the server's default), got {page_size}"
            )

        async def fetch(token: str) -> tuple[list[T], str]:
            return parse(await self._call(build(parent, page_size or 0, token)))

        return AsyncPager(fetch)
