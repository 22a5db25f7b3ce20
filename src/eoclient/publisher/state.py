"""What a publisher reports about itself: its lifecycle state and a statistics snapshot."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["PublisherState", "PublisherStatistics"]


class PublisherState(enum.Enum):
    UNOPENED = "unopened"  # constructed, not entered
    OPEN = "open"  # accepting publishes
    CLOSING = "closing"  # aclose() running: no new publishes, sending what is left
    CLOSED = "closed"  # tasks ended, channel closed


@dataclass(frozen=True, slots=True)
class PublisherStatistics:
    """A snapshot of one client (:meth:`PublisherClient.statistics`).

    Attributes:
        state: the client's :class:`PublisherState`.
        published_messages: futures resolved with a message id.
        failed_messages: futures failed (server errors, paused keys, closing).
        publish_rpcs: ``Publish`` attempts, retries included.
        retried_rpcs: attempts that failed with a retryable status and were retried.
        batching_messages: messages in batches not yet handed to the sequencer.
        batches_in_flight: batches sent (or being retried) and not yet resolved.
        outstanding_messages / outstanding_bytes: admitted by flow control, not yet
            resolved (counted under every behaviour).
        waiting_messages / waiting_bytes: parked by ``BLOCK`` flow control.
        paused_keys: (topic, ordering key) pairs paused by a failure, in pause order.
    """

    state: PublisherState
    published_messages: int
    failed_messages: int
    publish_rpcs: int
    retried_rpcs: int
    batching_messages: int
    batches_in_flight: int
    outstanding_messages: int
    outstanding_bytes: int
    waiting_messages: int
    waiting_bytes: int
    paused_keys: tuple[tuple[str, str], ...]
