"""Waiting for the ledger's results: the futures side of an :class:`~.ledger.AckRecord`.

The ledger only records results and says which records got some; this module hands them
to whoever waits. Futures exist only for callers that wait (``ack_with_response()``,
``MessageBatch.ack_with_response()``): a fire-and-forget ``ack()`` costs none.

Each waiter gets a future of its own rather than sharing one per record: a task cancelled
while it awaits a future cancels that future, so a shared one would cancel the result for
every other waiter of the record (``asyncio.shield`` would cost a second future per wait
anyway). The price is small: with 1,000 tasks each awaiting one result (CPU time, Python
3.11), a future per waiter cost 4.7 µs a waiter against 4.3 µs for one shared future —
nearly all of it is creating and waking the waiting task, which sharing does not save.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from eoclient.subscriber.ack_results import AckResult
from eoclient.subscriber.ledger import AckRecord

__all__ = ["completion", "deliver", "result_of"]


def result_of(record: AckRecord, index: int) -> asyncio.Future[AckResult]:
    """A future of the result at ``index`` of ``record``, for one waiter."""
    future: asyncio.Future[AckResult] = asyncio.get_running_loop().create_future()
    result = record.result(index)
    if result is not None:
        future.set_result(result)
    elif record.waiters is None:
        record.waiters = [(index, future)]
    else:
        record.waiters.append((index, future))
    return future


def completion(record: AckRecord) -> asyncio.Future[None]:
    """A future done once every position of ``record`` has its result, for one waiter."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if record.unresolved == 0:
        future.set_result(None)
    elif record.completion_waiters is None:
        record.completion_waiters = [future]
    else:
        record.completion_waiters.append(future)
    return future


def deliver(records: Iterable[AckRecord]) -> None:
    """Hand the results of ``records`` to their waiters: the one place where the results
    of a confirmation, a unary answer or a written request reach the application.

    Per-position waiters get their result as soon as it is known; whole-record waiters
    and ``on_resolved`` once every position has one.
    """
    for record in records:
        waiters = record.waiters
        results = record.results
        if waiters and results is not None:
            left: list[tuple[int, asyncio.Future[AckResult]]] | None = None
            for index, future in waiters:
                result = results[index]
                if result is None:
                    if left is None:
                        left = []
                    left.append((index, future))
                elif not future.done():
                    future.set_result(result)
            record.waiters = left
        if record.unresolved == 0:
            completion_waiters = record.completion_waiters
            if completion_waiters:
                record.completion_waiters = None
                for done in completion_waiters:
                    if not done.done():
                        done.set_result(None)
            on_resolved = record.on_resolved
            if on_resolved is not None:
                record.on_resolved = None
                on_resolved(record)
