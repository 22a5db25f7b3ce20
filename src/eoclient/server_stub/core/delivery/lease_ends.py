"""What a lease's end without an ack means for its message: a nack or an expiry is a
failed attempt, after which the message waits again — after the retry policy's backoff,
and with ordering keys with every later delivered message of its key, so that they are
delivered again after it, in order (docs/protocol.md#ordering-keys) — or, when it used up
its delivery attempts, goes to the dead-letter topic (``DeliveryRules.forward`` publishes
it there and it is settled here as if acked; if the dead-letter topic is gone the message
stays and every later failure tries again), or for good when it outlived the retention
while it was leased.

``lease_ended`` is that for one lease (a nack, an expiry); ``nacked_many`` for the leases
one request's nacks ended at once (``Leases.end_many``), without ordering keys: the same
consequences, in the ids' order, with the messages given back together
(``Waiting.give_back_many``).

Part of the delivery engine (``engine.SubscriptionDelivery``), which ends the leases and
hands them here; ``settle`` is its way of settling a message wherever the core holds it.
"""

from __future__ import annotations

from collections.abc import Callable

from eoclient.server_stub.core.delivery.entries import Counters, Entry
from eoclient.server_stub.core.delivery.lease_run import EndedRun
from eoclient.server_stub.core.delivery.lease_table import Lease
from eoclient.server_stub.core.delivery.leases import Ended, Leases
from eoclient.server_stub.core.delivery.rules import DeliveryRules
from eoclient.server_stub.core.delivery.waiting import Waiting
from eoclient.server_stub.core.model import StoredMessage

# ``settle(seq, acked, now)``: the message leaves wherever the core holds it (False: it
# holds it nowhere).
Settle = Callable[[int, bool, float], bool]


class LeaseEnds:
    def __init__(
        self,
        waiting: Waiting,
        leases: Leases,
        rules: DeliveryRules,
        counters: Counters,
        settle: Settle,
    ) -> None:
        self._waiting = waiting
        self._leases = leases
        self._rules = rules
        self._counters = counters
        self._settle = settle

    def lease_ended(
        self, lease: Lease, body: StoredMessage | None, ended_at: float, now: float
    ) -> None:
        """Nack or expiry of ``lease`` (out of the leases already), ended at
        ``ended_at``: a failed attempt (module docstring)."""
        seq = lease.seq
        failed_attempts = lease.failed_attempts + 1
        ready_at = ended_at + self._rules.backoff(failed_attempts)
        followers: list[Ended] = []
        for later in self._waiting.rewind(seq):
            # Sent back with it, not failed: their attempts stay as they were.
            ended = self._leases.end(later, failed=False)
            if ended is not None:
                followers.append(ended)
        self._waiting.give_back(lease, body, ready_at, failed_attempts, now)
        for follower, follower_body in followers:
            self._waiting.give_back(
                follower, follower_body, ready_at, follower.failed_attempts, now
            )
        if self._rules.attempts_used_up(failed_attempts) and self._forward(seq, now):
            return
        if self._rules.past_retention(lease.publish_time, now):
            self.drop(seq, now)

    def nacked_many(self, ended: EndedRun, held: list[Entry] | None, now: float) -> None:
        """``lease_ended(lease, body, now, now)`` of each lease ``ended`` (nacked at
        ``now``, without ordering keys: no rewinds; ``held``: their entries, or None) at
        once: the messages given back
        together, then, in the ids' order, those that used up their attempts forwarded
        and those past the retention dropped."""
        rules = self._rules
        failed = [attempts + 1 for attempts in ended.failed_attempts]
        if rules.retry_policy is None:
            ready_at = [now] * len(failed)  # no backoff (``DeliveryRules.backoff``)
        else:
            backoff = rules.backoff
            ready_at = [now + backoff(attempts) for attempts in failed]
        self._counters.nacked += len(failed)
        self._waiting.give_back_many(ended, held, ready_at, failed, now)
        limit = rules.max_delivery_attempts
        cutoff = rules.retention_cutoff(now)
        if (limit is None or max(failed) < limit) and min(ended.publish_times) > cutoff:
            return  # none forwarded, none dropped: the common case, in two passes in C
        for seq, attempts, published in zip(ended.seqs, failed, ended.publish_times, strict=True):
            if rules.attempts_used_up(attempts) and self._forward(seq, now):
                continue
            if rules.past_retention(published, now):
                self.drop(seq, now)

    def _forward(self, seq: int, now: float) -> bool:
        """Divert the would-be next delivery to the dead-letter topic (True if done)."""
        forward = self._rules.forward
        if forward is None:
            return False
        message, failed_attempts = self._waiting.body(seq)
        if message is None or not forward(message, failed_attempts):
            return False  # the dead-letter topic is gone: keep redelivering
        self._counters.dead_lettered += 1
        self._settle(seq, True, now)  # acked on the source subscription
        return True

    def drop(self, seq: int, now: float) -> None:
        """Past the retention: dropped, not retained."""
        self._counters.discarded += 1
        self._settle(seq, False, now)
