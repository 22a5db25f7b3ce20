"""What one admin RPC is, how it is made and retried, and how a paged list is read.

Every part of the admin API (topics, subscriptions, snapshots, schemas, IAM policies, the
broker-policy extension: one module each) builds a :class:`Request` and hands it to
:meth:`AdminCalls._call`; list calls hand a request builder to :meth:`AdminCalls._pager`.
Those parts import this module and nothing of each other, so the admin package has no
import cycle; :class:`~eoclient.admin.AdminClient` is their union plus the channel's
lifecycle.

Retries
-------

Every call takes ``retry=`` and ``timeout=``. By default a call is retried as the official
GAPIC configuration retries it (docs/protocol.md#admin-call-retries; google-cloud-pubsub 2.44,
``pubsub_v1/services/*/transports/base.py``): after 0.1 s, ×1.3 per attempt, at most 60 s
apart, for 600 s (Publisher service) or 60 s (the others), on the statuses of
:data:`RETRIED_CODES` — UNAVAILABLE everywhere (the request most likely never reached the
server), ABORTED and UNKNOWN where GAPIC adds them. DEADLINE_EXCEEDED, which GAPIC does
not retry for these methods, is retried where repeating the call cannot change its answer:
reads (get, list, validate, test permissions) and writes that set a state (update, modify
push config, seek). A create, delete, detach, commit or skip may have happened before its
deadline passed; repeated, it would answer ALREADY_EXISTS / NOT_FOUND / a second revision
for what was the caller's own success, so it is not retried on DEADLINE_EXCEEDED. The IAM
methods have no GAPIC retry; their reads get the read rule, ``SetIamPolicy`` none (a repeat
of a success is refused for its outdated etag).

``timeout`` (the client's, 60 s, unless given) is the call's whole budget, retries
included; it ends the Publisher service's 600 s retries first, as the GAPIC default
timeout of 60 s does there in intent.
"""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

from google.protobuf.message import Message

from eoclient._clock import AsyncClock
from eoclient._retrying import (
    DEFAULT,
    Default,
    RetrySettings,
    call_with_retry,
    check_timeout,
)
from eoclient._transport import PubSubTransport
from eoclient.errors import RpcError

__all__ = [
    "RETRIED_CODES",
    "AdminCalls",
    "AsyncPager",
    "Request",
    "Retry",
    "Timeout",
    "check_retry",
]

Retry: TypeAlias = RetrySettings | Default | None
"""An admin call's ``retry=``: ``DEFAULT`` (the method's GAPIC retry), settings, or
``None`` (one attempt)."""
Timeout: TypeAlias = float | Default | None
"""An admin call's ``timeout=``: ``DEFAULT`` (the client's), seconds, or ``None`` (no
deadline)."""

_log = logging.getLogger("eoclient.admin")

_GAPIC_READ = frozenset({"ABORTED", "UNAVAILABLE", "UNKNOWN"})  # GAPIC's reads, create sub
_UNAVAILABLE = frozenset({"UNAVAILABLE"})
_DEADLINE = frozenset({"DEADLINE_EXCEEDED"})

RETRIED_CODES: Mapping[str, frozenset[str]] = {
    # google.pubsub.v1.Publisher
    "CreateTopic": _UNAVAILABLE,
    "UpdateTopic": _UNAVAILABLE | _DEADLINE,
    "GetTopic": _GAPIC_READ | _DEADLINE,
    "ListTopics": _GAPIC_READ | _DEADLINE,
    "ListTopicSubscriptions": _GAPIC_READ | _DEADLINE,
    "ListTopicSnapshots": _GAPIC_READ | _DEADLINE,
    "DeleteTopic": _UNAVAILABLE,
    "DetachSubscription": _UNAVAILABLE,
    # google.pubsub.v1.Subscriber
    "CreateSubscription": _GAPIC_READ,
    "GetSubscription": _GAPIC_READ | _DEADLINE,
    "UpdateSubscription": _UNAVAILABLE | _DEADLINE,
    "ListSubscriptions": _GAPIC_READ | _DEADLINE,
    "DeleteSubscription": _UNAVAILABLE,
    "ModifyPushConfig": _UNAVAILABLE | _DEADLINE,
    "GetSnapshot": _GAPIC_READ | _DEADLINE,
    "ListSnapshots": _GAPIC_READ | _DEADLINE,
    "CreateSnapshot": _UNAVAILABLE,
    "UpdateSnapshot": _UNAVAILABLE | _DEADLINE,
    "DeleteSnapshot": _UNAVAILABLE,
    "Seek": _GAPIC_READ | _DEADLINE,
    # google.pubsub.v1.SchemaService
    "CreateSchema": _UNAVAILABLE,
    "GetSchema": _UNAVAILABLE | _DEADLINE,
    "ListSchemas": _UNAVAILABLE | _DEADLINE,
    "ListSchemaRevisions": _UNAVAILABLE | _DEADLINE,
    "CommitSchema": _UNAVAILABLE,
    "RollbackSchema": _UNAVAILABLE,
    "DeleteSchemaRevision": _UNAVAILABLE,
    "DeleteSchema": _UNAVAILABLE,
    "ValidateSchema": _UNAVAILABLE | _DEADLINE,
    "ValidateMessage": _UNAVAILABLE | _DEADLINE,
    # google.iam.v1.IAMPolicy
    "GetIamPolicy": _UNAVAILABLE | _DEADLINE,
    "SetIamPolicy": frozenset(),
    "TestIamPermissions": _UNAVAILABLE | _DEADLINE,
    # eoclient.broker.v1.BrokerPolicies (eoclient's own; the same rule)
    "SkipMessages": _UNAVAILABLE,  # a repeat answers ALREADY_ACKNOWLEDGED, not SKIPPED
    "GetTopicPolicies": _UNAVAILABLE | _DEADLINE,
    "SetTopicPolicies": _UNAVAILABLE | _DEADLINE,
    "GetTopicPolicyCounters": _UNAVAILABLE | _DEADLINE,
    "GetSubscriptionPolicies": _UNAVAILABLE | _DEADLINE,
    "SetSubscriptionPolicies": _UNAVAILABLE | _DEADLINE,
    "GetSubscriptionPolicyCounters": _UNAVAILABLE | _DEADLINE,
    "SeekWithOutcome": _GAPIC_READ | _DEADLINE,
}

# The GAPIC retry deadline: 600 s for the Publisher service's methods, 60 s elsewhere.
_PUBLISHER_RETRY = RetrySettings(deadline=600.0)
_OTHER_RETRY = RetrySettings(deadline=60.0)


def check_retry(retry: object) -> Retry:
    """``retry`` if it is one (``DEFAULT``, ``None`` or settings), else a clear error."""
    if retry is DEFAULT or retry is None or isinstance(retry, RetrySettings):
        return retry
    raise TypeError(f"retry must be a RetrySettings or None (one attempt), got {retry!r}")


def default_retry(service: str, method: str) -> RetrySettings:
    """A method's retry settings by default, with its codes."""
    base = _PUBLISHER_RETRY if service == "Publisher" else _OTHER_RETRY
    return RetrySettings(
        base.initial_backoff,
        base.max_backoff,
        base.multiplier,
        base.deadline,
        RETRIED_CODES.get(method, _UNAVAILABLE),
    )


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
    """The base class of every part of ``AdminClient``: a call (:meth:`_call`) and a paged
    list (:meth:`_pager`), which are all a part uses.

    The parts keep no state and read none of the client's: what a call needs is handed to
    ``__init__`` once, by the client — ``transport`` (a function returning the channel's
    transport: it opens the channel on the first call and raises ``ClosedError`` after
    ``aclose``), the client's default ``timeout`` and ``retry``, and the ``clock`` and
    ``rng`` the retries' backoffs use. They are kept in name-mangled attributes
    (``self.__timeout`` is ``_AdminCalls__timeout``), which neither a part nor the client
    can read or overwrite by accident.
    """

    def __init__(
        self,
        transport: Callable[[], PubSubTransport],
        *,
        timeout: float | None,
        retry: Retry,
        clock: AsyncClock,
        rng: random.Random,
    ) -> None:
        self.__transport = transport
        self.__timeout = check_timeout(timeout)
        self.__retry = check_retry(retry)  # the client's: DEFAULT, None or settings
        self.__clock = clock
        self.__rng = rng

    async def _call(
        self, request: Request[ResponseT], retry: Retry = DEFAULT, timeout: Timeout = DEFAULT
    ) -> ResponseT:
        """Make ``request``, retried by ``retry`` within ``timeout`` (module docstring)."""
        method_default = default_retry(request.service, request.method)
        retry = check_retry(retry)
        if retry is DEFAULT:
            retry = self.__retry
        if retry is DEFAULT:
            retry = method_default
        budget = self.__timeout if timeout is DEFAULT else check_timeout(timeout)
        codes = method_default.codes if retry is None or retry.codes is None else retry.codes
        assert codes is not None
        transport = self.__transport()

        def attempt(seconds: float | None) -> Awaitable[ResponseT]:
            return transport.call(
                request.service,
                request.method,
                request.message,
                request.response,
                routing=request.routing,
                timeout=seconds,
            )

        retries = 0

        def on_retry(number: int, error: RpcError, delay: float) -> None:
            nonlocal retries
            retries = number
            _log.debug(
                "%s %s failed (attempt %d): %s; retrying in %.3f s",
                request.method,
                request.routing[1],
                number,
                error,
                delay,
            )

        try:
            return await call_with_retry(
                attempt,
                backoff=retry,
                codes=frozenset(codes),
                timeout=budget,
                now=self.__clock.now,
                sleep=self.__clock.sleep,
                rng=self.__rng,
                on_retry=on_retry,
            )
        except RpcError as error:
            if retries:
                _log.debug(
                    "%s %s failed for good after %d attempts: %s",
                    request.method,
                    request.routing[1],
                    retries + 1,
                    error,
                )
            raise

    def _pager(
        self,
        build: Callable[[str, int, str], Request[ResponseT]],
        parse: Callable[[ResponseT], tuple[list[T], str]],
        parent: str,
        page_size: int | None,
        retry: Retry = DEFAULT,
        timeout: Timeout = DEFAULT,
    ) -> AsyncPager[T]:
        """Pages of ``build(parent, page_size, token)``'s answers, read by ``parse``; each
        page's call is retried by ``retry`` within ``timeout``."""
        if page_size is not None and page_size <= 0:
            raise ValueError(
                f"page_size must be > 0 (None = the server's default), got {page_size}"
            )

        async def fetch(token: str) -> tuple[list[T], str]:
            request = build(parent, page_size or 0, token)
            return parse(await self._call(request, retry, timeout))

        return AsyncPager(fetch)
