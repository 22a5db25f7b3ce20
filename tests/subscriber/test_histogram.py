"""Ack-latency histogram (nearest rank, clamped to [10, 600]) and bounded_deadline."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eoclient.subscriber.histogram import (
    HistogramStatistics,
    LatencyHistogram,
    bounded_deadline,
)

# Nearest-rank examples from https://en.wikipedia.org/wiki/Percentile#The_nearest-rank_method,
# as in Go distribution_test.go (p as a percentage here). Values below the histogram's floor of
# 10 are shifted up by OFFSET: the nearest rank does not care where the values sit.
OFFSET = 100


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([15, 20, 35, 40, 50], {5: 15, 30: 20, 40: 20, 50: 35, 100: 50}),
        ([3, 6, 7, 8, 8, 10, 13, 15, 16, 20], {25: 7, 50: 8, 75: 15, 100: 20}),
        ([3, 6, 7, 8, 8, 9, 10, 13, 15, 16, 20], {25: 7, 50: 9, 75: 15, 100: 20}),
    ],
)
def test_nearest_rank_examples(values: list[int], expected: dict[float, int]) -> None:
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value + OFFSET)
    for p, value in expected.items():
        assert histogram.percentile(p) == value + OFFSET


def test_p99_of_a_hundred_values_is_the_99th_not_the_100th() -> None:
    # 99/100 * 100 must be exactly rank 99 (floats would give 99.00000000000001 -> 100).
    histogram = LatencyHistogram()
    for value in range(11, 111):
        histogram.record(value)
    assert histogram.percentile(99) == 109
    assert histogram.percentile(100) == 110


@pytest.mark.parametrize(
    ("recorded", "stored"),
    [
        (-5.0, 10),
        (0.0, 10),
        (9.2, 10),
        (10.0, 10),
        (10.0001, 11),  # rounded up: a lease must cover the whole handling time
        (42.0, 42),
        (599.5, 600),
        (600.0, 600),
        (10_000.0, 600),
        (math.inf, 600),
    ],
)
def test_values_are_ceiled_and_clamped(recorded: float, stored: int) -> None:
    histogram = LatencyHistogram()
    histogram.record(recorded)
    assert histogram.percentile(1) == stored == histogram.percentile(100)


def test_empty_histogram_reports_the_minimum() -> None:
    histogram = LatencyHistogram()
    assert len(histogram) == 0
    assert histogram.percentile(99) == 10
    assert histogram.statistics() == HistogramStatistics(count=0, p99=10)
    assert repr(histogram) == "<LatencyHistogram count=0 p99=10>"


def test_len_statistics_and_repr() -> None:
    histogram = LatencyHistogram()
    for value in (12, 30, 30):
        histogram.record(value)
    assert len(histogram) == 3
    assert histogram.statistics() == HistogramStatistics(count=3, p99=30)
    assert repr(histogram) == "<LatencyHistogram count=3 p99=30>"


@pytest.mark.parametrize("p", [0, -1, 100.5, math.nan])
def test_percentile_out_of_range_is_rejected(p: float) -> None:
    with pytest.raises(ValueError, match=r"p must be in \(0, 100\]"):
        LatencyHistogram().percentile(p)


def test_nan_is_rejected() -> None:
    with pytest.raises(ValueError, match="nan"):
        LatencyHistogram().record(math.nan)


@given(st.lists(st.floats(allow_nan=False), min_size=1, max_size=50), st.floats(0.01, 100))
def test_percentile_matches_a_sorted_list(values: list[float], p: float) -> None:
    histogram = LatencyHistogram()
    for value in values:
        histogram.record(value)
    stored = sorted(math.ceil(min(max(v, 10), 600)) for v in values)
    rank = math.ceil(Fraction(p) * len(stored) / 100)  # exact, like the implementation
    assert histogram.percentile(p) == stored[rank - 1]
    assert len(histogram) == len(values)


@pytest.mark.parametrize(
    ("p99", "min_extension", "max_extension", "exactly_once", "expected"),
    [
        (10, 0, 0, False, 10),
        (42, 0, 0, False, 42),
        (5, 0, 0, False, 10),  # floor of the server's range
        (900, 0, 0, False, 600),  # cap of the server's range
        (10, 0, 0, True, 60),  # exactly-once floor
        (90, 0, 0, True, 90),
        (90, 0, 30, False, 30),  # cap by max_extension
        (90, 0, 30, True, 60),  # the EOD floor wins over the cap (Go boundedDuration)
        (20, 45, 0, False, 45),  # floor by min_extension
        (20, 45, 0, True, 45),  # a set min_extension replaces the EOD floor
        (200, 45, 0, True, 200),
        (200, 45, 100, True, 100),
        (5, 45, 100, False, 45),
        (300, 600, 600, False, 600),
        (math.nan, 0, 0, False, 10),
    ],
)
def test_bounded_deadline(
    p99: float, min_extension: float, max_extension: float, exactly_once: bool, expected: float
) -> None:
    assert (
        bounded_deadline(
            p99, min_extension=min_extension, max_extension=max_extension, exactly_once=exactly_once
        )
        == expected
    )


@given(
    p99=st.floats(allow_nan=True),
    min_extension=st.sampled_from([0.0, 10.0, 60.0, 600.0]) | st.floats(10, 600),
    max_extension=st.sampled_from([0.0, 10.0, 600.0]) | st.floats(10, 600),
    exactly_once=st.booleans(),
)
def test_bounded_deadline_is_always_in_the_server_range(
    p99: float, min_extension: float, max_extension: float, exactly_once: bool
) -> None:
    result = bounded_deadline(
        p99, min_extension=min_extension, max_extension=max_extension, exactly_once=exactly_once
    )
    assert 10 <= result <= 600
