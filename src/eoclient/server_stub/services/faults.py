"""RPC-level fault injection: the reference server as a test instrument.

Per-message ack failures live in the broker core (``broker.acks.inject_failure``)
because both doors (gRPC and REST) must honour them the same way; whole-call
failures and dropped streams are decided here, before the core is reached.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class InjectedStatus:
    code: str  # canonical status name, e.g. "UNAVAILABLE"
    message: str


@dataclass
class _Planned:
    status: InjectedStatus
    remaining: int  # < 0: forever


class RpcFaults:
    """Planned failures per RPC method name (``"Publish"``, ``"Acknowledge"``, ...)."""

    def __init__(self) -> None:
        self._planned: dict[str, deque[_Planned]] = {}
        self.stream_drops = 0  # bumped by drop_streams(); streams compare their snapshot

    def fail(self, method: str, code: str, message: str = "", *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` fail with ``code`` (-1: every call)."""
        text = message or f"injected {code} for {method}"
        self._planned.setdefault(method, deque()).append(
            _Planned(InjectedStatus(code, text), times)
        )

    def take(self, method: str) -> InjectedStatus | None:
        queue = self._planned.get(method)
        while queue:
            planned = queue[0]
            if planned.remaining == 0:
                queue.popleft()
                continue
            if planned.remaining > 0:
                planned.remaining -= 1
            return planned.status
        return None

    def clear(self) -> None:
        self._planned.clear()
