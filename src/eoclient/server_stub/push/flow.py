"""Push-side flow control of one push subscription (pure: takes ``now``, returns actions).

What Pub/Sub documents for push delivery ("Push subscriptions": *Push backoff*, *Delivery
rate*), and how each rule is kept here:

* **The push window.** At most ``window`` pushes are outstanding. It starts small
  (``initial_window``: "a small single-digit window") and grows by one for every
  success up to ``max_window``; every failure halves it (never below one). Additive
  increase, multiplicative decrease: a receiver that recovers is ramped up gently, one
  that fails is relieved at once.
* **Push backoff.** A failure (a non-success status, a timeout, a refused connection)
  when the subscription has no retry policy delays the next push of the whole
  subscription: ``min_backoff`` doubled per consecutive failure up to ``max_backoff``
  (the documented 100 ms .. 60 s); a success clears it. With a retry policy the broker
  core delays the failed message itself (its nack backoff), so no subscription-wide
  delay is added on top.
* **Ordering keys.** The broker leases a key's messages in order and may lease several
  at once; here at most one message per key is in flight, the next is sent only after
  the previous one succeeded, and when one fails every later message of its key that
  is held is released (nacked) too, so the key is redelivered from the failed message
  on. Messages without a key are not sequenced.
* **Leases.** Held messages (in flight or waiting behind their key) keep their lease:
  ``leases_to_extend`` names those past half their lease so the shell extends them
  before the broker would redeliver them.

Items are opaque to this module (the shell passes ack ids); ``PushFlow`` only needs
each one's ordering key.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

__all__ = ["Failure", "PushFlow", "PushSettings"]


@dataclass(frozen=True)
class PushSettings:
    """Push flow-control constants (seconds; windows in messages).

    ``initial_window``: pushes allowed outstanding at the start ("small single-digit").
    ``max_window``: the most ever allowed outstanding (the service's per-subscription
    ceiling is not published; 1,000 keeps one local receiver from being flooded).
    ``min_backoff`` / ``max_backoff``: the documented push backoff, 100 ms to 60 s.
    """

    initial_window: int = 3
    max_window: int = 1000
    min_backoff: float = 0.1
    max_backoff: float = 60.0

    def __post_init__(self) -> None:
        if not 1 <= self.initial_window <= self.max_window:
            raise ValueError("need 1 <= initial_window <= max_window")
        if not 0 < self.min_backoff <= self.max_backoff:
            raise ValueError("need 0 < min_backoff <= max_backoff")


@dataclass(frozen=True, slots=True)
class Failure:
    """What the shell does after a failed push: nack ``item`` and every one of
    ``released`` (later messages of its key that were held)."""

    item: str
    released: tuple[str, ...] = ()


@dataclass(slots=True)
class _Held:
    key: str
    lease_until: float
    lease_seconds: float
    in_flight: bool


@dataclass
class PushFlow:
    """One push subscription's window, backoff and per-key sequencing."""

    settings: PushSettings = field(default_factory=PushSettings)
    window: int = 0
    consecutive_failures: int = 0
    not_before: float = 0.0  # no new push before this time (push backoff)
    _held: dict[str, _Held] = field(default_factory=dict)
    _waiting: dict[str, deque[str]] = field(default_factory=dict)  # key -> held, not sent
    _busy_keys: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        if self.window == 0:
            self.window = self.settings.initial_window

    # ------------------------------------------------------------ reading

    @property
    def outstanding(self) -> int:
        """Messages held: being pushed, or leased and waiting behind their key."""
        return len(self._held)

    @property
    def in_flight(self) -> int:
        return sum(1 for h in self._held.values() if h.in_flight)

    def room(self, now: float) -> int:
        """How many more messages to lease now (0 during a push backoff)."""
        if now < self.not_before:
            return 0
        return max(0, self.window - len(self._held))

    def next_wakeup(self, now: float) -> float | None:
        """When something here becomes due: the end of a backoff or a lease half-life."""
        times = [h.lease_until - h.lease_seconds / 2 for h in self._held.values()]
        if self.not_before > now:
            times.append(self.not_before)
        return min(times) if times else None

    # ------------------------------------------------------------ actions

    def admit(self, items: list[tuple[str, str]], now: float, lease_seconds: float) -> list[str]:
        """Leased ``(item, ordering_key)`` pairs, in the broker's order; the items to push
        now (the rest wait behind an earlier message of their key)."""
        send: list[str] = []
        for item, key in items:
            self._held[item] = _Held(key, now + lease_seconds, lease_seconds, False)
            if key and (key in self._busy_keys or self._waiting.get(key)):
                self._waiting.setdefault(key, deque()).append(item)
                continue
            if key:
                self._busy_keys.add(key)
            self._held[item].in_flight = True
            send.append(item)
        return send

    def succeeded(self, item: str, now: float) -> list[str]:
        """``item`` was acknowledged by its endpoint: the window grows, the backoff ends;
        the next message of its key, if one is held, is to be pushed now."""
        held = self._held.pop(item, None)
        self.window = min(self.window + 1, self.settings.max_window)
        self.consecutive_failures = 0
        self.not_before = 0.0
        if held is None or not held.key:
            return []
        return self._next_of_key(held.key)

    def failed(self, item: str, now: float, *, backoff: bool) -> Failure:
        """``item``'s push failed: the window halves; with ``backoff`` (no retry policy)
        the subscription waits before its next push; held later messages of its key are
        released with it."""
        held = self._held.pop(item, None)
        self.window = max(1, self.window // 2)
        self.consecutive_failures += 1
        if backoff:
            delay = min(
                self.settings.min_backoff * 2 ** (self.consecutive_failures - 1),
                self.settings.max_backoff,
            )
            self.not_before = max(self.not_before, now + delay)
        if held is None or not held.key:
            return Failure(item)
        released = tuple(self._waiting.pop(held.key, ()))
        for other in released:
            del self._held[other]
        self._busy_keys.discard(held.key)
        return Failure(item, released)

    def leases_to_extend(self, now: float) -> list[tuple[str, float]]:
        """Held items past half their lease, with the lease (seconds) to renew them for;
        their leases count from ``now`` on."""
        due: list[tuple[str, float]] = []
        for item, held in self._held.items():
            if now >= held.lease_until - held.lease_seconds / 2:
                held.lease_until = now + held.lease_seconds
                due.append((item, held.lease_seconds))
        return due

    def forget(self) -> list[str]:
        """The subscription stops pushing (deleted, switched to pull): every held item
        that is not in flight, to be released; in-flight ones finish on their own."""
        waiting = [item for queue in self._waiting.values() for item in queue]
        for item in waiting:
            del self._held[item]
        self._waiting.clear()
        return waiting

    def _next_of_key(self, key: str) -> list[str]:
        queue = self._waiting.get(key)
        if not queue:
            self._busy_keys.discard(key)
            self._waiting.pop(key, None)
            return []
        item = queue.popleft()
        if not queue:
            del self._waiting[key]
        self._held[item].in_flight = True
        return [item]
