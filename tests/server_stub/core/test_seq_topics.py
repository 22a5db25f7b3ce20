"""The index of which topic each run of message ids went to (core/seq_topics.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.server_stub.core.seq_topics import SeqTopics


def test_runs_merge_and_answer_by_seq() -> None:
    index = SeqTopics()
    index.record(1, 3, "a")
    index.record(4, 4, "a")  # the same topic right after: one run
    index.record(5, 6, "b")
    index.record(7, 6, "c")  # an empty publish records nothing
    assert len(index) == 2
    assert [index.topic_of(s) for s in range(8)] == [None, "a", "a", "a", "a", "b", "b", None]


def test_past_its_bound_the_oldest_half_goes_and_is_unknown() -> None:
    index = SeqTopics(max_runs=4)
    for seq, topic in enumerate("abab", start=1):
        index.record(seq, seq, topic)
    index.record(5, 5, "a")  # a fifth run: the oldest two are dropped
    assert len(index) == 3
    assert index.indexed_from == 3
    assert [index.topic_of(s) for s in range(1, 6)] == [None, None, "a", "b", "a"]


def test_a_restored_index_knows_nothing_before_it() -> None:
    index = SeqTopics(indexed_from=101)
    index.record(101, 110, "a")
    assert index.topic_of(100) is None
    assert index.topic_of(105) == "a"
    with pytest.raises(ValueError, match="max_runs"):
        SeqTopics(max_runs=1)


@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from("abc")), max_size=60))
def test_it_agrees_with_a_plain_map(publishes: list[tuple[int, str]]) -> None:
    index = SeqTopics(max_runs=8)
    plain: dict[int, str] = {}
    last = 0
    for count, topic in publishes:
        index.record(last + 1, last + count, topic)
        for seq in range(last + 1, last + count + 1):
            plain[seq] = topic
        last += count
    for seq in range(last + 2):
        found = index.topic_of(seq)
        assert found is None or found == plain[seq]
        assert (found is None) == (seq < index.indexed_from or seq not in plain)
