"""Waiting for the ledger's results: the futures side of an :class:`~.ack_records.AckRecord`.

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

from eoclient.subscriber.ack_records import AckRecord
from eoclient.subscriber.ack_results import AckResult

__all__ = ["completion", "deliver", "result_of"]


def result_of(record: AckRecord, index: int) -> asyncio.Future[AckResult]:
    """A future of the result at ``index`` of ``record``, for one waiter."""
    future: asyncio.Future[AckResult] = asyncio.get_running_loop().create_future()
    result = record.result(index)
    if result is not None:
        future.set_result(result)
    else:
        record.add_waiter(index, future)
    return future


def completion(record: AckRecord) -> asyncio.Future[None]:
    """A future done once every position of ``record`` has its result, for one waiter."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if record.unresolved == 0:
        future.set_result(None)
    else:
        record.add_completion_waiter(future)
    return future


def deliver(records: Iterable[AckRecord]) -> None:
    """Hand the results of ``records`` to their waiters: the one place where the results
    of a confirmation, a unary answer or a written request reach the application.

    Per-position waiters get their result as soon as it is known; whole-record waiters
    and the ``when_resolved`` callback once every position has one.
    """
    for record in records:
        if record.waiters:
            for future, result in record.take_answered_waiters():
                if not future.done():
                    future.set_result(result)
        if record.unresolved == 0:
            completion_waiters, callback = record.take_completion()
            for done in completion_waiters:
                if not done.done():
                    done.set_result(None)
            if callback is not None:
                callback(record)
