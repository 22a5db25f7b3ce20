"""Ordering keys of one subscription: which message of each key may go next
(docs/protocol.md#ordering-keys).

The unacknowledged messages of a key that the core holds — waiting in the window, leased,
or back from a lease with their bodies in the store — form a sequence (``KeySequence``)
by absolute position, whose delivered part is a prefix. Only the first undelivered
message of a key (its *head*) may be scheduled; delivering it makes the next one the head.
When a delivered message goes back to waiting (nack, expiry), every later delivered
message of its key goes back too (``rewind``), so they are delivered again after it, in
order.

Messages enter a sequence in seq order (the window loads in seq order, so a key's loaded
messages are always a prefix of its messages): a new message is appended; one coming back
from a lease keeps its place. A message that leaves for good (acked, dropped) is told
here (``removed``) and stays in its sequence, as *gone*, until it reaches the front: a
sequence is a list bisected by seq, so nothing is taken out of its middle.

Part of the waiting messages (``waiting.Waiting``), which tells this object what happens
and asks it what to schedule; ``in_window`` is the window's set of seqs (a message of a
key neither there nor gone is back from a lease, its body in the store).
"""

from __future__ import annotations

from collections.abc import Container

from eoclient.server_stub.core.delivery.entries import KeySequence


class KeyOrder:
    def __init__(self, in_window: Container[int]) -> None:
        self._in_window = in_window
        self._keys: dict[str, KeySequence] = {}
        # The key of each message held outside the window (leased, or returned): the
        # window's entries carry theirs in their message.
        self._key_of: dict[int, str] = {}
        # Messages that left while a message before them in their key is still held.
        self._gone: set[int] = set()

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        self._keys.clear()
        self._key_of.clear()
        self._gone.clear()

    def admit(self, seq: int, key: str, *, returned: bool) -> tuple[int, bool]:
        """Message ``seq`` of ``key`` enters the window: its absolute position, and whether
        it is its key's head (then it may be scheduled). ``returned``: it was delivered
        before and keeps its place."""
        sequence = self._keys.get(key)
        if returned and sequence is not None:
            self._key_of.pop(seq, None)
            position = sequence.position_of(seq)
        else:
            if sequence is None:
                sequence = self._keys[key] = KeySequence()
            position = sequence.end()
            sequence.seqs.append(seq)
        return position, sequence.next_position == position

    def is_head(self, key: str, position: int) -> bool:
        sequence = self._keys.get(key)
        return sequence is None or sequence.next_position == position

    def delivered(self, seq: int, key: str) -> int | None:
        """The head ``seq`` of ``key`` was leased: the seq of the window entry to schedule
        next, if any (a message back from a lease is scheduled when the window loads it)."""
        self._key_of[seq] = key
        return self._advance(self._keys[key])

    def key_of(self, seq: int) -> str:
        """The key of a message held outside the window ("" if none)."""
        return self._key_of.get(seq, "")

    def rewind(self, seq: int) -> list[int]:
        """Leased message ``seq`` waits again: it becomes its key's head, and the seqs of
        the later messages of its key delivered since are returned (their leases end too;
        those already waiting are among them as well, unharmed)."""
        key = self._key_of.get(seq, "")
        if not key:
            return []
        sequence = self._keys[key]
        position = sequence.position_of(seq)
        if position >= sequence.next_position:
            return []  # already waiting behind an earlier rewind of its key
        later = [sequence.seq_at(p) for p in range(position + 1, sequence.next_position)]
        sequence.next_position = position
        return later

    def removed(self, seq: int, key: str, position: int, *, waited: bool) -> int | None:
        """Message ``seq`` of ``key`` left (acked, dropped), from ``position`` (-1: unknown)
        after ``waited`` in the window or as returned, or not (leased): the seq of the
        window entry to schedule in its place, if it was its key's head."""
        self._key_of.pop(seq, None)
        sequence = self._keys[key]
        if position < 0:
            position = sequence.position_of(seq)
        self._gone.add(seq)
        # A waiting message may leave while it is its key's head (the only one of the
        # key scheduled): a stale ack without exactly-once, a dead letter, retention. The
        # next one must be scheduled in its place or the key would never be delivered
        # again.
        follower = (
            self._advance(sequence) if waited and sequence.next_position == position else None
        )
        self._prune(key, sequence)
        return follower

    def unacked_before(self, seq: int) -> bool:
        """Exactly-once ordering: is an earlier message of leased ``seq``'s key unacked?"""
        key = self._key_of.get(seq, "")
        if not key:
            return False
        sequence = self._keys[key]
        self._prune(key, sequence)
        return sequence.base < sequence.position_of(seq)

    def restore_lease(self, seq: int, key: str) -> None:
        """After a restart, a stored lease of ``key`` (in seq order, before any window
        entry: a key's leased messages are a prefix of its unacknowledged ones)."""
        sequence = self._keys.get(key)
        if sequence is None:
            sequence = self._keys[key] = KeySequence()
        sequence.seqs.append(seq)
        sequence.next_position = sequence.end()  # every one of them delivered
        self._key_of[seq] = key

    def _advance(self, sequence: KeySequence) -> int | None:
        """Past the head: the next undelivered message that waits in the window, if any."""
        sequence.next_position += 1
        while sequence.next_position < sequence.end():
            follower = sequence.seq_at(sequence.next_position)
            if follower in self._in_window:
                return follower
            if follower not in self._gone:
                return None  # back from a lease: scheduled when the window loads it
            sequence.next_position += 1  # acked out of order (no exactly-once): skip
        return None

    def _prune(self, key: str, sequence: KeySequence) -> None:
        gone = self._gone
        while (first := sequence.first()) is not None and first in gone:
            gone.discard(first)
            sequence.pop_first()
        sequence.next_position = max(sequence.next_position, sequence.base)
        if not len(sequence):
            del self._keys[key]
