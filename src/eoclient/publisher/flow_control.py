"""Publisher flow control: how many messages (and bytes) may be outstanding (pure).

A message is *outstanding* from the moment ``publish`` accepts it until its future
resolves; sizes are encoded ``PubsubMessage`` sizes (``PublishFlowControl`` docstring).

Behaviours (:class:`~eoclient.publisher.settings.LimitExceededBehavior`, Python
``publisher/flow_controller.py``; docs/protocol.md#publisher-flow-control):

* ``IGNORE`` — every message is admitted; totals are still counted, for statistics.
* ``ERROR`` — a message that does not fit raises ``FlowControlLimitError`` and is
  not counted.
* ``BLOCK`` — a message that does not fit is queued with the shell's *waiter* (e.g. an
  ``asyncio.Future`` the ``publish`` coroutine awaits) and admitted later, first in
  first out, by :meth:`PublishFlowController.release`. A message larger than
  ``max_bytes`` could never fit, so it raises ``FlowControlLimitError`` instead of
  waiting forever (as Python does).

FIFO: while anyone waits, a newcomer waits too, even if it would fit, so a stream of
small messages cannot starve a large one. Python gets the same effect with partial
"reservations" of bytes and slots handed to blocked threads in arrival order; a single-
threaded core that admits whole waiters atomically needs no partial reservations: the
capacity freed by releases stays unclaimed until the head waiter fits.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from eoclient.errors import FlowControlLimitError
from eoclient.publisher.settings import LimitExceededBehavior, PublishFlowControl

__all__ = ["FlowControlStatistics", "PublishFlowController"]

W = TypeVar("W", bound=Hashable)


@dataclass(frozen=True, slots=True)
class FlowControlStatistics:
    """A snapshot of a :class:`PublishFlowController`.

    Attributes:
        outstanding_messages / outstanding_bytes: admitted, not yet released.
        waiting_messages / waiting_bytes: queued under ``BLOCK``, in arrival order.
    """

    outstanding_messages: int
    outstanding_bytes: int
    waiting_messages: int
    waiting_bytes: int


class PublishFlowController(Generic[W]):
    """Outstanding-message accounting with the three behaviours (module docstring).

    Waiters are the shell's hashable tokens; each is, at any moment, either waiting
    here or gone (admitted, which :meth:`release` reports, or cancelled).
    """

    __slots__ = (
        "_outstanding_bytes",
        "_outstanding_messages",
        "_settings",
        "_waiting",
        "_waiting_bytes",
    )

    def __init__(self, settings: PublishFlowControl) -> None:
        self._settings = settings
        self._outstanding_messages = 0
        self._outstanding_bytes = 0
        self._waiting: OrderedDict[W, int] = OrderedDict()  # waiter -> size, arrival order
        self._waiting_bytes = 0

    def __repr__(self) -> str:
        limits = self._settings
        return (
            f"<PublishFlowController {limits.behavior.name} "
            f"outstanding={self._outstanding_messages}/{limits.max_messages or 'unlimited'} "
            f"messages, {self._outstanding_bytes}/{limits.max_bytes or 'unlimited'} bytes; "
            f"waiting={len(self._waiting)} messages, {self._waiting_bytes} bytes>"
        )

    @property
    def settings(self) -> PublishFlowControl:
        return self._settings

    def statistics(self) -> FlowControlStatistics:
        return FlowControlStatistics(
            outstanding_messages=self._outstanding_messages,
            outstanding_bytes=self._outstanding_bytes,
            waiting_messages=len(self._waiting),
            waiting_bytes=self._waiting_bytes,
        )

    def acquire(self, size: int, waiter: W) -> bool:
        """Ask to admit one message of ``size`` bytes.

        Args:
            size: the message's encoded size, >= 0.
            waiter: the shell's token for this message; used only if it must wait.

        Returns:
            ``True``: admitted and counted now. ``False`` (``BLOCK`` only): queued;
            a later :meth:`release` or :meth:`cancel` returns ``waiter`` once it is
            admitted.

        Raises:
            FlowControlLimitError: ``ERROR`` and the message does not fit now, or
                ``BLOCK`` and the message alone exceeds ``max_bytes``.
            ValueError: ``size`` < 0, or ``waiter`` is already waiting.
        """
        if size < 0:
            raise ValueError(f"PublishFlowController.acquire: size must be >= 0, got {size!r}")
        behavior = self._settings.behavior
        if behavior is LimitExceededBehavior.IGNORE or (not self._waiting and self._fits(size)):
            self._admit(size)
            return True
        if behavior is LimitExceededBehavior.ERROR:
            raise FlowControlLimitError(
                "publish flow control limits would be exceeded: "
                + self._load(self._outstanding_messages + 1, self._outstanding_bytes + size)
            )
        max_bytes = self._settings.max_bytes
        if max_bytes and size > max_bytes:
            raise FlowControlLimitError(
                f"a message of {size} bytes exceeds the publish flow control byte limit "
                f"({max_bytes}) on its own and would wait forever"
            )
        if waiter in self._waiting:
            raise ValueError(f"PublishFlowController.acquire: {waiter!r} is already waiting")
        self._waiting[waiter] = size
        self._waiting_bytes += size
        return False

    def release(self, size: int) -> list[W]:
        """One outstanding message of ``size`` bytes is done (published or failed).

        Returns:
            The waiters admitted as a result, in arrival order; they are outstanding
            now, and the shell wakes them.

        Raises:
            ValueError: nothing is outstanding, or ``size`` is negative or larger than
                the outstanding bytes; counts are left unchanged (a shell bug: a
                message released twice, or with a different size than acquired).
        """
        if self._outstanding_messages == 0 or not (0 <= size <= self._outstanding_bytes):
            raise ValueError(
                f"PublishFlowController.release: cannot release a message of {size!r} bytes "
                f"with {self._outstanding_messages} messages and {self._outstanding_bytes} "
                "bytes outstanding"
            )
        self._outstanding_messages -= 1
        self._outstanding_bytes -= size
        return self._admit_waiting()

    def cancel(self, waiter: W) -> list[W]:
        """A waiter gave up (its task was cancelled): forget it.

        Returns:
            Waiters behind it that are admitted now that it no longer holds the head
            of the queue. An unknown waiter (already admitted or cancelled) is ignored;
            if it was admitted, the shell must :meth:`release` its message instead.
        """
        size = self._waiting.pop(waiter, None)
        if size is None:
            return []
        self._waiting_bytes -= size
        return self._admit_waiting()

    def _fits(self, size: int) -> bool:
        max_messages, max_bytes = self._settings.max_messages, self._settings.max_bytes
        if max_messages and self._outstanding_messages + 1 > max_messages:
            return False
        return not (max_bytes and self._outstanding_bytes + size > max_bytes)

    def _admit(self, size: int) -> None:
        self._outstanding_messages += 1
        self._outstanding_bytes += size

    def _admit_waiting(self) -> list[W]:
        admitted: list[W] = []
        while self._waiting:
            waiter, size = next(iter(self._waiting.items()))
            if not self._fits(size):
                break
            del self._waiting[waiter]
            self._waiting_bytes -= size
            self._admit(size)
            admitted.append(waiter)
        return admitted

    def _load(self, messages: int, size: int) -> str:
        limits = self._settings
        return (
            f"messages {messages} / {limits.max_messages or 'unlimited'}, "
            f"bytes {size} / {limits.max_bytes or 'unlimited'}"
        )
