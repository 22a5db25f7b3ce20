"""Ordering keys on the publisher: which ready batches may be sent now (pure).

Modelled on Python's ``_sequencer/ordered_sequencer.py``
(docs/protocol.md#publisher-ordering-keys): per (topic, ordering key) at most **one batch in
flight**; the batches of a key leave in the order they became ready; when a batch of a key
fails for good, the key is **paused**: every batch queued behind it fails with
:class:`~eoclient.errors.OrderingKeyPausedError`, and so does every later publish to
the key, until ``resume``. Messages with the empty ordering key are not sequenced:
their batches are sent at once and may be in flight together (Python's
``UnorderedSequencer``).

Per-key states (Python's ``_OrderedSequencerStatus`` without the client-lifecycle
states; closing is the shell's business):

* ``FINISHED`` — nothing in flight, nothing queued, not paused. The key holds no
  memory here (Python drops such sequencers in its cleanup thread).
* ``ACCEPTING_MESSAGES`` — a batch is in flight, perhaps with more queued.
* ``PAUSED`` — a batch failed permanently; publishes fail fast until :meth:`resume`.

Transitions::

    FINISHED --submit--> ACCEPTING_MESSAGES --done(ok), queue empty--> FINISHED
    ACCEPTING_MESSAGES --done(ok), queue not empty--> ACCEPTING_MESSAGES (next sent)
    ACCEPTING_MESSAGES --done(failed)--> PAUSED (queue failed)
    PAUSED --resume--> FINISHED

The shell's contract: call :meth:`check_publish` before accepting a message; hand each
ready batch from the batcher to :meth:`submit` in the order the batcher returned them;
report each sent batch's outcome with :meth:`on_batch_done` (``ok=False`` only for a
*final* failure, after retries). When an outcome pauses a key, also close that key's
open batch in the batcher (``Batcher.close``) and fail its handles.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from eoclient.errors import OrderingKeyPausedError

__all__ = ["KeyState", "Sequencer", "SequencerActions"]

B = TypeVar("B")


class KeyState(enum.Enum):
    """The state of one (topic, ordering key); see the module docstring."""

    FINISHED = "finished"
    ACCEPTING_MESSAGES = "accepting_messages"
    PAUSED = "paused"


@dataclass(frozen=True, slots=True)
class SequencerActions(Generic[B]):
    """What the shell must do after a sequencer call.

    Attributes:
        send: batches to send now, in this order.
        fail: batches whose every handle must fail with ``OrderingKeyPausedError``
            (their key is paused), in their original order.
    """

    send: tuple[B, ...] = ()
    fail: tuple[B, ...] = ()


@dataclass(slots=True)
class _Key(Generic[B]):
    in_flight: bool = False
    paused: bool = False
    queued: deque[B] = field(default_factory=deque)


class Sequencer(Generic[B]):
    """Per-key sequencing of ready batches; batches themselves are opaque (``B``)."""

    __slots__ = ("_keys", "_unordered_in_flight")

    def __init__(self) -> None:
        # Only keys that are not FINISHED are stored, so memory follows activity.
        self._keys: dict[tuple[str, str], _Key[B]] = {}
        self._unordered_in_flight = 0

    def __repr__(self) -> str:
        in_flight = sum(1 for key in self._keys.values() if key.in_flight)
        queued = sum(len(key.queued) for key in self._keys.values())
        paused = sum(1 for key in self._keys.values() if key.paused)
        return (
            f"<Sequencer ordered_in_flight={in_flight} queued={queued} paused_keys={paused} "
            f"unordered_in_flight={self._unordered_in_flight}>"
        )

    def state(self, topic: str, ordering_key: str) -> KeyState:
        key = self._keys.get((topic, ordering_key))
        if key is None:
            return KeyState.FINISHED
        return KeyState.PAUSED if key.paused else KeyState.ACCEPTING_MESSAGES

    def queued(self, topic: str, ordering_key: str) -> int:
        """Batches of the key waiting behind the one in flight."""
        key = self._keys.get((topic, ordering_key))
        return 0 if key is None else len(key.queued)

    @property
    def in_flight(self) -> int:
        """Batches sent and not yet reported done, ordered and unordered."""
        return self._unordered_in_flight + sum(1 for key in self._keys.values() if key.in_flight)

    def check_publish(self, topic: str, ordering_key: str) -> None:
        """Raise ``OrderingKeyPausedError`` if publishing to the key must fail fast."""
        key = self._keys.get((topic, ordering_key))
        if key is not None and key.paused:
            raise OrderingKeyPausedError(topic, ordering_key)

    def submit(self, topic: str, ordering_key: str, batch: B) -> SequencerActions[B]:
        """A batch of the key is ready.

        Returns:
            ``send=(batch,)`` if it may go now (empty key, or nothing of the key in
            flight); nothing if it is queued; ``fail=(batch,)`` if the key is paused
            (the shell should have closed that batch at pause time, so this only
            happens when it did not).
        """
        if not ordering_key:
            self._unordered_in_flight += 1
            return SequencerActions(send=(batch,))
        state = self._keys.get((topic, ordering_key))
        if state is None:
            state = self._keys[(topic, ordering_key)] = _Key()
        if state.paused:
            return SequencerActions(fail=(batch,))
        if state.in_flight:
            state.queued.append(batch)
            return SequencerActions()
        state.in_flight = True
        return SequencerActions(send=(batch,))

    def on_batch_done(self, topic: str, ordering_key: str, ok: bool) -> SequencerActions[B]:
        """The key's batch in flight finished: ``ok`` = published, else failed for good.

        Returns:
            If ``ok``: the key's next batch to send, if one is queued. Otherwise the
            key is now paused and every queued batch is returned in ``fail``.

        Raises:
            ValueError: no batch of the key is in flight (a shell bug).
        """
        if not ordering_key:
            if self._unordered_in_flight <= 0:
                raise ValueError(
                    f"Sequencer.on_batch_done: no unordered batch of {topic} is in flight"
                )
            self._unordered_in_flight -= 1
            return SequencerActions()
        key = (topic, ordering_key)
        state = self._keys.get(key)
        if state is None or not state.in_flight:
            raise ValueError(
                f"Sequencer.on_batch_done: no batch of ordering key {ordering_key!r} on "
                f"{topic} is in flight"
            )
        state.in_flight = False
        if not ok:
            state.paused = True
            failed = tuple(state.queued)
            state.queued.clear()
            return SequencerActions(fail=failed)
        if state.queued:
            state.in_flight = True
            return SequencerActions(send=(state.queued.popleft(),))
        del self._keys[key]  # FINISHED: forget the key
        return SequencerActions()

    def resume(self, topic: str, ordering_key: str) -> bool:
        """Unpause a key; return whether it was paused.

        Unlike Python's ``unpause`` (``RuntimeError`` when not paused), resuming a key
        that is not paused is a harmless no-op, so a retrying caller need not track
        whether an earlier resume already happened.
        """
        key = (topic, ordering_key)
        state = self._keys.get(key)
        if state is None or not state.paused:
            return False
        # A paused key has nothing in flight or queued (both cleared when it paused, and
        # submit fails batches while paused), so it returns to FINISHED.
        del self._keys[key]
        return True

    def drain(self) -> list[B]:
        """Remove and return every queued (not in flight) batch, per key in order.

        For a shutdown that does not wait: the shell fails their handles. Batches in
        flight stay tracked until reported done.
        """
        drained: list[B] = []
        for key in self._keys.values():
            drained.extend(key.queued)
            key.queued.clear()
        return drained
