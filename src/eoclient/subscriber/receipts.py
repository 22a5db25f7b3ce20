"""Exactly-once receipts: a received message is handed out only once its receipt modack
succeeded. Synchronous, no I/O.

Under exactly-once, a receipt modack refused as invalid means the lease is already lost: the
message is not handed out, and comes again (docs/protocol.md#receipt-modacks). So the
messages of a response wait here for their receipt record's results
(``AckRecord.when_resolved``), which come back whenever the ledger has them: at once on a
server that confirms on the stream, after retries on one that does not.

Results can arrive out of arrival order (one response's receipt is retried while the next
one's succeeds at once). Messages without an ordering key do not care; a key's messages
must, or a later message would overtake an earlier one
(docs/protocol.md#ordering-on-the-subscriber). So per key, messages are released in
arrival order: a result that comes early is kept until the ones before it have theirs.

What happens to a message once its result is known is the dispatch core's decision
(``dispatch.py``); this room only says when and in what order, through two callbacks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

from eoclient.subscriber.ack_records import AckRecord
from eoclient.subscriber.ack_results import AcknowledgeStatus, AckResult
from eoclient.subscriber.message import Message

__all__ = ["ReceiptGate"]

SUCCESS = AcknowledgeStatus.SUCCESS


class ReceiptGate:
    """Received messages waiting for their receipt modack's result.

    Args:
        all_succeeded: called with the messages of a receipt record whose every receipt
            succeeded, none with an ordering key (the common case, in one call).
        after_receipt: called with each other message and its receipt's result, a key's
            messages in arrival order.
    """

    __slots__ = ("_after_receipt", "_all_succeeded", "_awaiting", "_early", "_records")

    def __init__(
        self,
        *,
        all_succeeded: Callable[[list[Message]], None],
        after_receipt: Callable[[Message, AckResult], None],
    ) -> None:
        self._all_succeeded = all_succeeded
        self._after_receipt = after_receipt
        # Per ordering key, its messages waiting for their receipt, in arrival order, and
        # the results that came in out of that order.
        self._awaiting: dict[str, deque[Message]] = {}
        self._early: dict[str, AckResult] = {}
        self._records: dict[AckRecord, list[Message]] = {}  # receipt record → its messages

    def expect(self, arrived: list[Message], receipts: list[AckRecord]) -> None:
        """``arrived`` (in order) wait for ``receipts``, the records of their receipt
        modacks (consecutive runs of ``arrived``)."""
        for message in arrived:
            if message.ordering_key:
                self._awaiting.setdefault(message.ordering_key, deque()).append(message)
        start = 0
        for record in receipts:
            self._records[record] = arrived[start : start + len(record)]
            start += len(record)
            record.when_resolved(self._resolved)

    def _resolved(self, record: AckRecord) -> None:
        messages = self._records.pop(record, None)
        if messages is None:
            return
        results = record.results
        assert results is not None  # called once every position has its result
        self._release(messages, results)

    def _release(self, messages: list[Message], results: Sequence[AckResult | None]) -> None:
        if all(r is not None and r.status is SUCCESS for r in results) and not any(
            m.ordering_key for m in messages
        ):
            self._all_succeeded(messages)  # the common case: every receipt succeeded, no keys
            return
        for message, result in zip(messages, results, strict=True):
            assert result is not None
            if not message.ordering_key:
                self._after_receipt(message, result)
                continue
            # A key's messages go on in arrival order, whichever receipt resolved
            # first: a later message of the key (another response, whose receipt
            # succeeded at once) must not overtake one whose receipt is being retried.
            self._early[message.ack_id] = result
            queue = self._awaiting.get(message.ordering_key)
            while queue and queue[0].ack_id in self._early:
                head = queue.popleft()
                self._after_receipt(head, self._early.pop(head.ack_id))
            if not queue:
                self._awaiting.pop(message.ordering_key, None)
