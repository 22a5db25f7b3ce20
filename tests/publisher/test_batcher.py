"""The publish batcher: count, byte and latency boundaries, per-key batches, order."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient._proto import pubsub_pb2
from eoclient.errors import MessageTooLargeError
from eoclient.publisher.batcher import Batch, Batcher
from eoclient.publisher.settings import BatchSettings
from eoclient.publisher.validation import (
    MAX_PUBLISH_REQUEST_BYTES,
    encoded_message_size,
    max_message_size,
    request_entry_size,
    request_overhead,
)

TOPIC = "projects/p/topics/t"
OVERHEAD = request_overhead(TOPIC)
T0 = 1000.0


def sized(data: bytes) -> tuple[bytes, int]:
    return data, encoded_message_size(data, {}, "")


def add(
    batcher: Batcher[bytes, int], handle: int, data: bytes, now: float = T0, key: str = ""
) -> list[Batch[bytes, int]]:
    message, size = sized(data)
    return batcher.add(TOPIC, key, message, handle, size, now)


def test_exactly_max_messages_makes_one_full_batch() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=math.inf))
    for i in range(99):
        assert add(batcher, i, b"m") == []
    [batch] = add(batcher, 99, b"m")
    assert len(batch) == 100
    assert batch.handles == tuple(range(100))
    assert batch.request_bytes == OVERHEAD + 100 * request_entry_size(3)
    assert batcher.pending_messages == 0
    assert add(batcher, 100, b"m") == []  # the 101st opens a new batch
    assert batcher.pending_messages == 1


def test_a_message_that_would_overflow_bytes_closes_the_batch_first() -> None:
    # Each b"x"*10 message is 12 bytes encoded, 14 in the request.
    entry = request_entry_size(12)
    batcher: Batcher[bytes, int] = Batcher(
        BatchSettings(max_bytes=OVERHEAD + 2 * entry + 1, max_latency=math.inf)
    )
    assert add(batcher, 0, b"x" * 10) == []
    assert add(batcher, 1, b"x" * 10) == []
    [first] = add(batcher, 2, b"x" * 10)  # 3 entries would be 1 byte... over
    assert first.handles == (0, 1)
    assert first.request_bytes == OVERHEAD + 2 * entry
    [second] = batcher.flush()
    assert second.handles == (2,)


def test_a_batch_exactly_at_max_bytes_is_closed_at_once() -> None:
    entry = request_entry_size(12)
    batcher: Batcher[bytes, int] = Batcher(
        BatchSettings(max_bytes=OVERHEAD + 2 * entry, max_latency=math.inf)
    )
    assert add(batcher, 0, b"x" * 10) == []
    [batch] = add(batcher, 1, b"x" * 10)
    assert batch.request_bytes == OVERHEAD + 2 * entry == batcher.settings.max_bytes


def test_a_message_larger_than_max_bytes_travels_alone() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_bytes=100, max_latency=math.inf))
    assert add(batcher, 0, b"small") == []
    closed, alone = add(batcher, 1, b"x" * 500)
    assert closed.handles == (0,)
    assert alone.handles == (1,)
    assert alone.request_bytes > 100


def test_a_message_that_can_never_fit_is_rejected_and_changes_nothing() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings())
    add(batcher, 0, b"a")
    limit = max_message_size(TOPIC)
    with pytest.raises(MessageTooLargeError, match="cannot fit"):
        batcher.add(TOPIC, "", b"", 1, limit + 1, T0)
    assert batcher.pending_messages == 1
    # The largest legal message closes the open batch, then fills a request on its own.
    closed, alone = batcher.add(TOPIC, "", b"", 2, limit, T0)
    assert (closed.handles, alone.handles) == ((0,), (2,))
    assert alone.request_bytes == MAX_PUBLISH_REQUEST_BYTES


def test_latency_due_exactly_at_the_deadline_counted_from_the_first_message() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=0.01))
    assert batcher.next_deadline() is None
    add(batcher, 0, b"a", now=T0)
    add(batcher, 1, b"b", now=T0 + 0.005)  # does not push the deadline back
    assert batcher.next_deadline() == T0 + 0.01
    assert batcher.due(T0 + 0.0099) == []
    [batch] = batcher.due(T0 + 0.01)
    assert batch.handles == (0, 1)
    assert batch.opened_at == T0
    assert batcher.next_deadline() is None


def test_zero_latency_is_due_immediately_and_infinite_never() -> None:
    now_batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=0))
    add(now_batcher, 0, b"a")
    assert now_batcher.next_deadline() == T0
    assert [b.handles for b in now_batcher.due(T0)] == [(0,)]
    never: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=math.inf))
    add(never, 0, b"a")
    assert never.next_deadline() is None
    assert never.due(T0 + 1e9) == []


def test_keys_and_topics_get_separate_batches_due_oldest_first() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=1.0))
    add(batcher, 0, b"a", now=T0, key="k1")
    add(batcher, 1, b"b", now=T0 + 0.1, key="")
    add(batcher, 2, b"c", now=T0 + 0.2, key="k1")
    batcher.add("projects/p/topics/other", "k1", b"d", 3, 3, T0 + 0.3)
    assert batcher.next_deadline() == T0 + 1.0
    ready = batcher.due(T0 + 1.15)
    assert [(b.ordering_key, b.handles) for b in ready] == [("k1", (0, 2)), ("", (1,))]
    assert batcher.next_deadline() == T0 + 1.3
    [other] = batcher.flush()
    assert (other.topic, other.ordering_key, other.handles) == (
        "projects/p/topics/other",
        "k1",
        (3,),
    )


def test_close_one_key() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings())
    add(batcher, 0, b"a", key="k")
    add(batcher, 1, b"b", key="j")
    closed = batcher.close(TOPIC, "k")
    assert closed is not None
    assert closed.handles == (0,)
    assert batcher.close(TOPIC, "k") is None
    assert [b.handles for b in batcher.flush()] == [(1,)]
    assert batcher.flush() == []


def test_flush_returns_everything_in_opening_order() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings())
    for i, key in enumerate(["b", "a", "c"]):
        add(batcher, i, b"x", now=T0 + i, key=key)
    assert [b.ordering_key for b in batcher.flush()] == ["b", "a", "c"]
    assert batcher.pending_messages == 0


def test_time_must_not_go_backwards_and_sizes_must_be_valid() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings())
    add(batcher, 0, b"a", now=T0)
    with pytest.raises(ValueError, match="now must never decrease"):
        batcher.due(T0 - 1)
    with pytest.raises(ValueError, match="size must be >= 0"):
        batcher.add(TOPIC, "", b"", 1, -1, T0)


def test_repr_is_precise() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings())
    add(batcher, 0, b"a", now=T0)
    assert repr(batcher) == (
        "<Batcher open_batches=1 pending_messages=1 next_deadline=1000.01 "
        "max_messages=100 max_bytes=1000000 max_latency=0.01>"
    )
    [batch] = batcher.flush()
    assert repr(batch) == (
        f"Batch(topic='{TOPIC}', ordering_key='', messages=1, "
        f"request_bytes={OVERHEAD + request_entry_size(3)}, opened_at=1000.0)"
    )


# --- properties --------------------------------------------------------------------

operations = st.lists(
    st.tuples(
        st.sampled_from(["", "k1", "k2"]),  # ordering key
        st.integers(min_value=1, max_value=400),  # data length
        st.floats(min_value=0, max_value=0.02),  # time step
        st.booleans(),  # call due() after this add
    ),
    max_size=120,
)


@given(
    ops=operations,
    max_messages=st.integers(min_value=1, max_value=8),
    max_bytes=st.integers(min_value=1, max_value=2000),
    max_latency=st.sampled_from([0.0, 0.01, 0.05, math.inf]),
)
def test_batches_respect_limits_preserve_order_and_lose_nothing(
    ops: list[tuple[str, int, float, bool]],
    max_messages: int,
    max_bytes: int,
    max_latency: float,
) -> None:
    batcher: Batcher[bytes, int] = Batcher(
        BatchSettings(max_messages=max_messages, max_bytes=max_bytes, max_latency=max_latency)
    )
    now = T0
    ready: list[Batch[bytes, int]] = []
    sent: dict[str, list[int]] = {}
    for handle, (key, length, step, call_due) in enumerate(ops):
        now += step
        data = bytes([handle % 256]) * length
        sent.setdefault(key, []).append(handle)
        ready += batcher.add(TOPIC, key, data, handle, encoded_message_size(data, {}, key), now)
        if call_due:
            ready += batcher.due(now)
    ready += batcher.flush()

    received: dict[str, list[int]] = {}
    for batch in ready:
        assert 1 <= len(batch) <= max_messages
        # Above max_bytes only as a lone oversized message; never above the server limit.
        assert batch.request_bytes <= max_bytes or len(batch) == 1
        assert batch.request_bytes <= MAX_PUBLISH_REQUEST_BYTES
        request = pubsub_pb2.PublishRequest(
            topic=batch.topic,
            messages=[
                pubsub_pb2.PubsubMessage(data=m, ordering_key=batch.ordering_key)
                for m in batch.messages
            ],
        )
        assert batch.request_bytes == request.ByteSize()
        assert len(batch.handles) == len(batch.messages) == len(batch.sizes)
        assert all(m[0] == h % 256 for m, h in zip(batch.messages, batch.handles, strict=True))
        received.setdefault(batch.ordering_key, []).extend(batch.handles)
    assert received == {key: handles for key, handles in sent.items() if handles}
    assert batcher.pending_messages == 0


def test_a_held_key_is_not_due_and_does_not_set_the_deadline() -> None:
    batcher: Batcher[str, int] = Batcher(BatchSettings(max_messages=10, max_latency=1.0))
    batcher.add("t", "k", "a", 1, 1, now=0.0)
    batcher.add("t", "", "b", 2, 1, now=0.5)
    batcher.hold("t", "k")
    assert batcher.next_deadline() == 1.5
    assert [b.ordering_key for b in batcher.due(1.2)] == []
    assert [b.ordering_key for b in batcher.due(2.0)] == [""]
    assert batcher.next_deadline() is None
    batcher.release("t", "k")
    assert batcher.next_deadline() == 1.0
    assert [b.messages for b in batcher.due(2.0)] == [("a",)]


def test_a_held_batch_still_closes_when_full() -> None:
    batcher: Batcher[str, int] = Batcher(BatchSettings(max_messages=2, max_latency=0))
    batcher.hold("t", "k")
    assert batcher.add("t", "k", "a", 1, 1, now=0.0) == []
    full = batcher.add("t", "k", "b", 2, 1, now=0.0)
    assert [b.messages for b in full] == [("a", "b")]


def test_a_message_with_other_options_closes_its_keys_batch_first() -> None:
    batcher: Batcher[bytes, int] = Batcher(BatchSettings(max_latency=math.inf))
    message, size = sized(b"m")
    assert batcher.add(TOPIC, "k", message, 0, size, T0, ("retry", 1)) == []
    assert batcher.add(TOPIC, "k", message, 1, size, T0, ("retry", 1)) == []  # equal: joins
    [closed] = batcher.add(TOPIC, "k", message, 2, size, T0, ("retry", 2))
    assert (closed.handles, closed.options) == ((0, 1), ("retry", 1))
    assert batcher.add(TOPIC, "other", message, 3, size, T0, None) == []  # keys are apart
    [rest, other] = batcher.flush()
    assert (rest.handles, rest.options) == ((2,), ("retry", 2))
    assert (other.handles, other.options) == ((3,), None)
