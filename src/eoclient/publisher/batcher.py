"""Groups published messages into ``PublishRequest``-sized batches (pure, injected clock).

One open batch per (topic, ordering key): all messages of one ``PublishRequest`` must
share the ordering key (``PubsubMessage.ordering_key``; docs/protocol.md#publish-limits), and the
empty key is a key like any other here (the sequencer decides what may go
concurrently). The shell feeds messages in with :meth:`Batcher.add`, asks
:meth:`Batcher.next_deadline` when to wake up, collects :meth:`Batcher.due` batches
then, and :meth:`Batcher.flush` es on close. Every method returns the batches that are
now *ready*: closed, immutable, to be handed to the sequencer in the order returned.

Rules (Python ``_batch/thread.py`` ``Batch.publish``; docs/protocol.md#publisher-batching):

* a batch is ready when it holds ``BatchSettings.max_messages`` messages;
* a message that would take the batch's encoded request size above
  ``BatchSettings.max_bytes`` (itself at most the server's 10,000,000) first closes the
  batch, then starts the next one; a message too big for ``max_bytes`` but within the
  server limit therefore travels alone;
* a batch is due ``max_latency`` seconds after its first message was added.

Differences from Python, on purpose: Python counts a batch as overflowing when
``count + 1 >= max_messages`` *before* adding, so its full batches hold
``max_messages - 1`` messages; here a full batch holds exactly ``max_messages``. And a
batch whose size has reached ``max_bytes`` exactly is closed at once instead of waiting
for its latency to pass, since no further message could join it.

Each message travels with an opaque *handle* (e.g. the future the shell returns from
``publish``); a ready batch carries messages, handles and sizes in publish order.

A message may also carry *options* (the shell's per-call retry and timeout), which the
whole batch's request is sent with. A message whose options differ from those of its
key's open batch closes that batch first, as a message that does not fit does: no message
travels under another's options, and a key's messages still leave in order. (The
official publisher lets a message join a batch opened with other options, which then
apply to it silently.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from eoclient.errors import MessageTooLargeError
from eoclient.publisher.settings import BatchSettings
from eoclient.publisher.validation import (
    MAX_PUBLISH_REQUEST_BYTES,
    max_message_size,
    request_entry_size,
    request_overhead,
)

__all__ = ["Batch", "Batcher"]

M = TypeVar("M")
H = TypeVar("H")


@dataclass(frozen=True, slots=True)
class Batch(Generic[M, H]):
    """A closed batch: the contents of one ``PublishRequest``.

    Attributes:
        topic: the topic's full name.
        ordering_key: shared by every message; ``""`` = none.
        messages: the shell's messages, in publish order.
        handles: one per message, same order (e.g. the futures to resolve with the
            ``PublishResponse.message_ids``, which come back in request order).
        sizes: each message's encoded ``PubsubMessage`` size, same order (what flow
            control must release).
        request_bytes: the encoded size of the whole ``PublishRequest``, exactly.
        opened_at: the ``now`` at which the first message was added.
        options: the options every message of the batch was added with (opaque).
    """

    topic: str
    ordering_key: str
    messages: tuple[M, ...]
    handles: tuple[H, ...]
    sizes: tuple[int, ...]
    request_bytes: int
    opened_at: float
    options: object = None

    def __len__(self) -> int:
        return len(self.messages)

    def __repr__(self) -> str:
        return (
            f"Batch(topic={self.topic!r}, ordering_key={self.ordering_key!r}, "
            f"messages={len(self.messages)}, request_bytes={self.request_bytes}, "
            f"opened_at={self.opened_at})"
        )


class _OpenBatch(Generic[M, H]):
    __slots__ = ("handles", "messages", "opened_at", "options", "request_bytes", "sizes")

    def __init__(self, overhead: int, opened_at: float, options: object) -> None:
        self.messages: list[M] = []
        self.handles: list[H] = []
        self.sizes: list[int] = []
        self.request_bytes = overhead
        self.opened_at = opened_at
        self.options = options


class Batcher(Generic[M, H]):
    """Open batches, one per (topic, ordering key); see the module docstring.

    ``now`` is the shell's monotonic clock in seconds and must never decrease between
    calls. Thanks to that, open batches are kept in the order they were opened, which
    is also the order of their deadlines, so :meth:`next_deadline` is O(1) (plus the
    held keys it skips) and :meth:`due` touches only the batches it returns (and the
    held ones).
    """

    __slots__ = (
        "_byte_limit",
        "_held",
        "_last_now",
        "_max_message_size",
        "_open",
        "_overheads",
        "_settings",
    )

    def __init__(self, settings: BatchSettings) -> None:
        self._settings = settings
        # BatchSettings already bounds max_bytes by the server limit; min() keeps this
        # class correct on its own.
        self._byte_limit = min(settings.max_bytes, MAX_PUBLISH_REQUEST_BYTES)
        # Insertion order == opening order == deadline order (class docstring).
        self._open: dict[tuple[str, str], _OpenBatch[M, H]] = {}
        self._overheads: dict[str, int] = {}  # topic -> request_overhead(topic)
        self._max_message_size: dict[str, int] = {}  # topic -> max_message_size(topic)
        self._last_now = -float("inf")
        # Keys whose open batch keeps filling past max_latency: a batch of the key is
        # in flight, so this one could not be sent yet anyway (see hold()).
        self._held: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        pending = sum(len(batch.messages) for batch in self._open.values())
        deadline = self.next_deadline()
        return (
            f"<Batcher open_batches={len(self._open)} pending_messages={pending} "
            f"next_deadline={deadline} max_messages={self._settings.max_messages} "
            f"max_bytes={self._byte_limit} max_latency={self._settings.max_latency}>"
        )

    @property
    def settings(self) -> BatchSettings:
        return self._settings

    @property
    def pending_messages(self) -> int:
        """Messages in open batches (not yet returned as ready)."""
        return sum(len(batch.messages) for batch in self._open.values())

    def add(
        self,
        topic: str,
        ordering_key: str,
        message: M,
        handle: H,
        size: int,
        now: float,
        options: object = None,
    ) -> list[Batch[M, H]]:
        """Add a message to the open batch of (topic, ordering_key).

        Args:
            topic, ordering_key: where the message goes.
            message, handle: opaque to the batcher; returned in the ready batch.
            size: the message's encoded ``PubsubMessage`` size, from
                :func:`~eoclient.publisher.validation.validate_message`.
            now: current time, seconds; never less than in an earlier call.
            options: the batch's request options (compared with ``==``); a message
                with other options than the open batch's starts a new batch.

        Returns:
            The batches that became ready, oldest first: none, the batch this message
            did not fit in (or whose options it does not share), and/or the batch it
            filled (at most two).

        Raises:
            MessageTooLargeError: the message can never fit in a ``PublishRequest`` to
                ``topic`` (``validate_message`` rejects it first in normal use).
            ValueError: ``size`` < 0 or ``now`` went backwards.
        """
        self._advance(now)
        if size < 0:
            raise ValueError(f"Batcher.add: size must be >= 0, got {size!r}")
        if size > self._message_limit(topic):
            raise MessageTooLargeError(
                f"a message of {size} encoded bytes cannot fit in a PublishRequest to {topic} "
                f"(server limit {MAX_PUBLISH_REQUEST_BYTES} bytes)"
            )
        ready: list[Batch[M, H]] = []
        key = (topic, ordering_key)
        entry = request_entry_size(size)
        batch = self._open.get(key)
        if batch is not None and (
            batch.request_bytes + entry > self._byte_limit
            or (batch.options is not options and batch.options != options)
        ):
            ready.append(self._close(key))
            batch = None
        if batch is None:
            batch = _OpenBatch(self._overhead(topic), now, options)
            self._open[key] = batch
        batch.messages.append(message)
        batch.handles.append(handle)
        batch.sizes.append(size)
        batch.request_bytes += entry
        if (
            len(batch.messages) >= self._settings.max_messages
            or batch.request_bytes >= self._byte_limit
        ):
            ready.append(self._close(key))
        return ready

    def next_deadline(self) -> float | None:
        """When the oldest open batch that is not held becomes due; ``None`` if none will.

        ``None`` when no such batch is open, or ``max_latency`` is ``math.inf``.
        """
        for key, batch in self._open.items():
            if key in self._held:
                continue
            deadline = batch.opened_at + self._settings.max_latency
            return None if deadline == float("inf") else deadline
        return None

    def hold(self, topic: str, ordering_key: str) -> None:
        """Let the key's open batch keep filling past ``max_latency`` (until ``release``).

        For ordering keys: while a batch of the key is in flight the next one cannot
        be sent, so closing it at ``max_latency`` would only queue a half-full batch;
        the official publisher likewise fills the waiting batch
        (docs/protocol.md#publisher-batching).
        A held batch still closes when it is full.
        """
        self._held.add((topic, ordering_key))

    def release(self, topic: str, ordering_key: str) -> None:
        """End ``hold``: the key's open batch is due again by its ``max_latency``."""
        self._held.discard((topic, ordering_key))

    def due(self, now: float) -> list[Batch[M, H]]:
        """Close and return every batch whose ``max_latency`` has passed, oldest first.

        Held batches (``hold``) are skipped; the others are in deadline order, so the
        scan stops at the first one not due.
        """
        self._advance(now)
        latency = self._settings.max_latency
        due_keys: list[tuple[str, str]] = []
        for key, batch in self._open.items():
            if key in self._held:
                continue
            if batch.opened_at + latency > now:
                break
            due_keys.append(key)
        return [self._close(key) for key in due_keys]

    def close(self, topic: str, ordering_key: str) -> Batch[M, H] | None:
        """Close the open batch of one key now, whatever its state; ``None`` if none.

        For the shell when the sequencer pauses the key (the batch's handles must fail
        with ``OrderingKeyPausedError``), or to flush one key.
        """
        key = (topic, ordering_key)
        return self._close(key) if key in self._open else None

    def flush(self) -> list[Batch[M, H]]:
        """Close and return every open batch, oldest first (for flush and close)."""
        ready = [self._close(key) for key in list(self._open)]
        return ready

    def _advance(self, now: float) -> None:
        if not (now >= self._last_now):  # also rejects NaN
            raise ValueError(
                f"Batcher: now must never decrease, got {now!r} after {self._last_now!r}"
            )
        self._last_now = now

    def _overhead(self, topic: str) -> int:
        overhead = self._overheads.get(topic)
        if overhead is None:
            overhead = self._overheads[topic] = request_overhead(topic)
        return overhead

    def _message_limit(self, topic: str) -> int:
        limit = self._max_message_size.get(topic)
        if limit is None:
            limit = self._max_message_size[topic] = max_message_size(topic)
        return limit

    def _close(self, key: tuple[str, str]) -> Batch[M, H]:
        batch = self._open.pop(key)
        return Batch(
            topic=key[0],
            ordering_key=key[1],
            messages=tuple(batch.messages),
            handles=tuple(batch.handles),
            sizes=tuple(batch.sizes),
            request_bytes=batch.request_bytes,
            opened_at=batch.opened_at,
            options=batch.options,
        )
