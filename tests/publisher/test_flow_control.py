"""Publisher flow control: IGNORE / ERROR / BLOCK, FIFO waiters, oversized messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.errors import FlowControlLimitError
from eoclient.publisher.flow_control import FlowControlStatistics, PublishFlowController
from eoclient.publisher.settings import LimitExceededBehavior, PublishFlowControl

BLOCK, ERROR, IGNORE = (
    LimitExceededBehavior.BLOCK,
    LimitExceededBehavior.ERROR,
    LimitExceededBehavior.IGNORE,
)


def controller(
    behavior: LimitExceededBehavior, max_messages: int = 0, max_bytes: int = 0
) -> PublishFlowController[str]:
    return PublishFlowController(
        PublishFlowControl(max_messages=max_messages, max_bytes=max_bytes, behavior=behavior)
    )


def test_ignore_always_admits_but_still_counts() -> None:
    flow = controller(IGNORE, max_messages=1, max_bytes=10)
    assert all(flow.acquire(100, f"w{i}") for i in range(5))
    assert flow.statistics() == FlowControlStatistics(5, 500, 0, 0)
    assert flow.release(100) == []
    assert flow.statistics() == FlowControlStatistics(4, 400, 0, 0)


@pytest.mark.parametrize(
    ("max_messages", "max_bytes", "sizes", "match"),
    [
        (2, 0, [1, 1, 1], r"messages 3 / 2, bytes 3 / unlimited"),
        (0, 10, [6, 5], r"messages 2 / unlimited, bytes 11 / 10"),
        (0, 10, [11], r"messages 1 / unlimited, bytes 11 / 10"),
    ],
)
def test_error_raises_at_once_and_does_not_count(
    max_messages: int, max_bytes: int, sizes: list[int], match: str
) -> None:
    flow = controller(ERROR, max_messages, max_bytes)
    *fitting, last = sizes
    for size in fitting:
        assert flow.acquire(size, "w")
    before = flow.statistics()
    with pytest.raises(FlowControlLimitError, match=match):
        flow.acquire(last, "w")
    assert flow.statistics() == before


def test_error_admits_exactly_up_to_the_limits() -> None:
    flow = controller(ERROR, max_messages=2, max_bytes=10)
    assert flow.acquire(4, "a")
    assert flow.acquire(6, "b")
    assert flow.statistics() == FlowControlStatistics(2, 10, 0, 0)


def test_block_waits_and_release_admits_fifo() -> None:
    flow = controller(BLOCK, max_messages=2)
    assert flow.acquire(1, "a")
    assert flow.acquire(1, "b")
    assert not flow.acquire(1, "c")
    assert not flow.acquire(1, "d")
    assert flow.statistics() == FlowControlStatistics(2, 2, 2, 2)
    assert flow.release(1) == ["c"]
    assert flow.release(1) == ["d"]
    assert flow.release(1) == []
    assert flow.statistics() == FlowControlStatistics(1, 1, 0, 0)


def test_block_small_messages_do_not_overtake_a_large_waiter() -> None:
    flow = controller(BLOCK, max_bytes=100)
    assert flow.acquire(60, "a")
    assert not flow.acquire(50, "big")  # 110 > 100
    assert not flow.acquire(10, "small")  # would fit, but must not overtake "big"
    assert flow.release(60) == ["big", "small"]
    assert flow.statistics() == FlowControlStatistics(2, 60, 0, 0)


def test_block_one_release_can_admit_several_waiters() -> None:
    flow = controller(BLOCK, max_bytes=10)
    assert flow.acquire(10, "a")
    assert not flow.acquire(3, "b")
    assert not flow.acquire(3, "c")
    assert not flow.acquire(5, "d")
    assert flow.release(10) == ["b", "c"]  # 6 bytes; d (5) would make 11
    assert flow.statistics() == FlowControlStatistics(2, 6, 1, 5)


def test_block_rejects_a_message_that_alone_exceeds_max_bytes() -> None:
    flow = controller(BLOCK, max_bytes=10)
    with pytest.raises(FlowControlLimitError, match=r"11 bytes exceeds .* \(10\) .* forever"):
        flow.acquire(11, "huge")
    assert flow.statistics() == FlowControlStatistics(0, 0, 0, 0)
    assert flow.acquire(10, "exact")  # exactly the limit is fine


def test_cancelled_waiter_at_the_head_lets_the_next_in() -> None:
    flow = controller(BLOCK, max_bytes=10)
    assert flow.acquire(5, "a")
    assert not flow.acquire(8, "big")
    assert not flow.acquire(2, "small")
    assert flow.cancel("big") == ["small"]
    assert flow.cancel("big") == []  # unknown now: ignored
    assert flow.statistics() == FlowControlStatistics(2, 7, 0, 0)


def test_a_waiter_cannot_wait_twice() -> None:
    flow = controller(BLOCK, max_messages=1)
    flow.acquire(1, "a")
    assert not flow.acquire(1, "w")
    with pytest.raises(ValueError, match="already waiting"):
        flow.acquire(1, "w")


@pytest.mark.parametrize(
    ("acquired", "released"),
    [([], 0), ([5], 6), ([5], -1)],
)
def test_bad_release_raises_and_changes_nothing(acquired: list[int], released: int) -> None:
    flow = controller(BLOCK)
    for size in acquired:
        flow.acquire(size, "x")
    before = flow.statistics()
    with pytest.raises(ValueError, match="cannot release"):
        flow.release(released)
    assert flow.statistics() == before


def test_negative_size_is_rejected() -> None:
    with pytest.raises(ValueError, match="size must be >= 0"):
        controller(IGNORE).acquire(-1, "x")


def test_repr_is_precise() -> None:
    flow = controller(BLOCK, max_messages=1, max_bytes=0)
    flow.acquire(3, "a")
    flow.acquire(4, "b")
    assert repr(flow) == (
        "<PublishFlowController BLOCK outstanding=1/1 messages, 3/unlimited bytes; "
        "waiting=1 messages, 4 bytes>"
    )


@given(
    behavior=st.sampled_from([BLOCK, ERROR, IGNORE]),
    max_messages=st.integers(min_value=0, max_value=5),
    max_bytes=st.integers(min_value=0, max_value=50),
    ops=st.lists(
        st.tuples(st.sampled_from(["acquire", "release", "cancel"]), st.integers(0, 30)),
        max_size=100,
    ),
)
def test_counts_never_go_negative_and_waiters_are_admitted_in_order(
    behavior: LimitExceededBehavior,
    max_messages: int,
    max_bytes: int,
    ops: list[tuple[str, int]],
) -> None:
    flow: PublishFlowController[int] = PublishFlowController(
        PublishFlowControl(max_messages=max_messages, max_bytes=max_bytes, behavior=behavior)
    )
    outstanding: list[int] = []  # sizes of admitted messages (model)
    waiting: list[tuple[int, int]] = []  # (waiter, size), arrival order (model)
    admitted_order: list[int] = []

    def admit(waiters: list[int]) -> None:
        # Admitted waiters are always a prefix of the queue, in order.
        assert waiters == [w for w, _ in waiting[: len(waiters)]]
        for w in waiters:
            admitted_order.append(w)
            outstanding.append(dict(waiting)[w])
        del waiting[: len(waiters)]

    for number, (op, value) in enumerate(ops):
        if op == "acquire":
            try:
                if flow.acquire(value, number):
                    assert not waiting or behavior is IGNORE
                    outstanding.append(value)
                else:
                    assert behavior is BLOCK
                    waiting.append((number, value))
            except FlowControlLimitError:
                assert behavior is not IGNORE
        elif op == "release" and outstanding:
            admit(flow.release(outstanding.pop(value % len(outstanding))))
        elif op == "cancel" and waiting:
            waiter, _ = waiting.pop(value % len(waiting))
            admit(flow.cancel(waiter))

        stats = flow.statistics()
        assert stats == FlowControlStatistics(
            len(outstanding), sum(outstanding), len(waiting), sum(s for _, s in waiting)
        )
        assert min(stats.outstanding_messages, stats.outstanding_bytes) >= 0
        if behavior is not IGNORE:
            # Under BLOCK and ERROR the limits always hold.
            assert not max_messages or stats.outstanding_messages <= max_messages
            assert not max_bytes or stats.outstanding_bytes <= max_bytes
        # Nobody waits when the head of the queue would fit.
        if waiting:
            head = waiting[0][1]
            assert (max_messages and len(outstanding) + 1 > max_messages) or (
                max_bytes and sum(outstanding) + head > max_bytes
            )
    assert admitted_order == sorted(admitted_order)
