"""Ordering keys: one batch in flight per key, order kept, pause on failure, resume."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.errors import OrderingKeyPausedError
from eoclient.publisher.sequencer import KeyState, Sequencer, SequencerActions

T = "projects/p/topics/t"


def test_one_batch_in_flight_per_key_and_order_kept() -> None:
    seq: Sequencer[str] = Sequencer()
    assert seq.submit(T, "k", "b1") == SequencerActions(send=("b1",))
    assert seq.submit(T, "k", "b2") == SequencerActions()
    assert seq.submit(T, "k", "b3") == SequencerActions()
    assert seq.state(T, "k") is KeyState.ACCEPTING_MESSAGES
    assert (seq.in_flight, seq.queued(T, "k")) == (1, 2)
    assert seq.on_batch_done(T, "k", ok=True) == SequencerActions(send=("b2",))
    assert seq.on_batch_done(T, "k", ok=True) == SequencerActions(send=("b3",))
    assert seq.on_batch_done(T, "k", ok=True) == SequencerActions()
    assert seq.state(T, "k") is KeyState.FINISHED
    assert seq.in_flight == 0


def test_different_keys_and_topics_are_independent() -> None:
    seq: Sequencer[str] = Sequencer()
    assert seq.submit(T, "a", "a1").send == ("a1",)
    assert seq.submit(T, "b", "b1").send == ("b1",)
    assert seq.submit("projects/p/topics/u", "a", "u1").send == ("u1",)
    assert seq.in_flight == 3


def test_empty_key_is_not_sequenced() -> None:
    seq: Sequencer[str] = Sequencer()
    assert [seq.submit(T, "", f"u{i}").send for i in range(3)] == [("u0",), ("u1",), ("u2",)]
    assert seq.in_flight == 3
    assert seq.on_batch_done(T, "", ok=False) == SequencerActions()  # never pauses
    seq.check_publish(T, "")
    assert seq.state(T, "") is KeyState.FINISHED
    assert seq.on_batch_done(T, "", ok=True) == SequencerActions()
    assert seq.on_batch_done(T, "", ok=True) == SequencerActions()
    with pytest.raises(ValueError, match="no unordered batch"):
        seq.on_batch_done(T, "", ok=True)


def test_failure_pauses_the_key_and_fails_its_queue() -> None:
    seq: Sequencer[str] = Sequencer()
    seq.submit(T, "k", "b1")
    seq.submit(T, "k", "b2")
    seq.submit(T, "k", "b3")
    seq.submit(T, "other", "o1")
    assert seq.on_batch_done(T, "k", ok=False) == SequencerActions(fail=("b2", "b3"))
    assert seq.state(T, "k") is KeyState.PAUSED
    assert seq.queued(T, "k") == 0
    # Other keys carry on.
    assert seq.state(T, "other") is KeyState.ACCEPTING_MESSAGES
    seq.check_publish(T, "other")


def test_a_paused_key_fails_fast_until_resumed() -> None:
    seq: Sequencer[str] = Sequencer()
    seq.submit(T, "k", "b1")
    seq.on_batch_done(T, "k", ok=False)
    with pytest.raises(OrderingKeyPausedError, match="resume_publish") as caught:
        seq.check_publish(T, "k")
    assert (caught.value.topic, caught.value.ordering_key) == (T, "k")
    # A batch that reaches a paused key anyway is failed, not sent.
    assert seq.submit(T, "k", "late") == SequencerActions(fail=("late",))
    assert seq.resume(T, "k") is True
    assert seq.state(T, "k") is KeyState.FINISHED
    seq.check_publish(T, "k")
    assert seq.submit(T, "k", "b2") == SequencerActions(send=("b2",))


def test_resume_of_a_key_that_is_not_paused_is_a_no_op() -> None:
    seq: Sequencer[str] = Sequencer()
    assert seq.resume(T, "never-seen") is False
    seq.submit(T, "k", "b1")
    assert seq.resume(T, "k") is False
    assert seq.state(T, "k") is KeyState.ACCEPTING_MESSAGES


def test_done_without_a_batch_in_flight_is_a_bug() -> None:
    seq: Sequencer[str] = Sequencer()
    with pytest.raises(ValueError, match="no batch of ordering key 'k'"):
        seq.on_batch_done(T, "k", ok=True)
    seq.submit(T, "k", "b1")
    seq.on_batch_done(T, "k", ok=False)
    with pytest.raises(ValueError, match="is in flight"):
        seq.on_batch_done(T, "k", ok=True)


def test_drain_returns_queued_batches_and_keeps_in_flight() -> None:
    seq: Sequencer[str] = Sequencer()
    seq.submit(T, "a", "a1")
    seq.submit(T, "a", "a2")
    seq.submit(T, "b", "b1")
    seq.submit(T, "b", "b2")
    seq.submit(T, "b", "b3")
    assert seq.drain() == ["a2", "b2", "b3"]
    assert seq.in_flight == 2
    assert seq.on_batch_done(T, "a", ok=True) == SequencerActions()
    assert seq.state(T, "a") is KeyState.FINISHED


def test_repr_is_precise() -> None:
    seq: Sequencer[str] = Sequencer()
    seq.submit(T, "a", "a1")
    seq.submit(T, "a", "a2")
    seq.submit(T, "", "u1")
    seq.submit(T, "p", "p1")
    seq.on_batch_done(T, "p", ok=False)
    assert repr(seq) == (
        "<Sequencer ordered_in_flight=1 queued=1 paused_keys=1 unordered_in_flight=1>"
    )


@given(
    st.lists(
        st.tuples(st.sampled_from(["submit", "done", "fail", "resume"]), st.sampled_from("ab")),
        max_size=80,
    )
)
def test_per_key_order_and_at_most_one_in_flight(ops: list[tuple[str, str]]) -> None:
    """Every batch is sent or failed exactly once, each key's sends are in submit order,
    and a key never has two batches in flight."""
    seq: Sequencer[int] = Sequencer()
    in_flight: dict[str, int | None] = {"a": None, "b": None}
    submitted: dict[str, list[int]] = {"a": [], "b": []}
    sent: dict[str, list[int]] = {"a": [], "b": []}
    failed: dict[str, list[int]] = {"a": [], "b": []}

    def apply(key: str, actions: SequencerActions[int]) -> None:
        assert len(actions.send) <= 1
        for batch in actions.send:
            assert in_flight[key] is None
            in_flight[key] = batch
            sent[key].append(batch)
        failed[key].extend(actions.fail)

    for number, (op, key) in enumerate(ops):
        if op == "submit":
            submitted[key].append(number)
            apply(key, seq.submit(T, key, number))
        elif op in ("done", "fail") and in_flight[key] is not None:
            in_flight[key] = None
            apply(key, seq.on_batch_done(T, key, ok=op == "done"))
        elif op == "resume":
            seq.resume(T, key)

    drained = seq.drain()
    for key in "ab":
        leftover = [n for n in drained if n in submitted[key]]
        # Each batch is sent, failed or still queued, exactly once ...
        assert sorted(sent[key] + failed[key] + leftover) == submitted[key]
        # ... and a key's batches leave in the order they were submitted.
        assert sent[key] == sorted(sent[key])
