"""The dashboard's charts (observe/dashboard/charts.py): axes, round ticks, units, labels."""

from __future__ import annotations

import re

from eoclient.server_stub.observe.dashboard.charts import (
    AGE,
    MESSAGES,
    PER_SECOND,
    Series,
    line_chart,
    nice_ceiling,
    sparkline,
    time_ticks,
    value_axis_top,
)

START = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def test_round_numbers_for_the_value_axis() -> None:
    assert [nice_ceiling(v) for v in (0.3, 1, 1.1, 2.2, 3, 7, 11, 4000)] == [
        0.5,
        1,
        2,
        2.5,
        5,
        10,
        20,
        5000,
    ]
    assert value_axis_top(37) == 40  # ticks 0, 10, 20, 30, 40
    assert value_axis_top(10, whole=True) == 12  # 2.5 a tick would not be a count
    assert value_axis_top(0) == 1.0


def test_time_ticks_are_round_clock_times_inside_the_span() -> None:
    assert time_ticks(START + 7, START + 67) == [START + 10 + 10 * i for i in range(6)]
    hour = time_ticks(START, START + 3600)
    assert len(hour) <= 6
    assert all(t % 600 == 0 for t in hour)
    assert time_ticks(START + 1, START + 3) == [START + 1, START + 3]  # too short: the ends


def test_a_chart_has_both_axes_their_labels_and_units() -> None:
    points = [(START + 5 * i, float(i * i)) for i in range(13)]  # one minute, 0..144
    svg = line_chart("Backlog", MESSAGES, [Series("backlog", points)], chart_id="c")
    assert "time (UTC)" in svg
    assert ">messages</text>" in svg
    y_ticks = re.findall(r"<text class='tick y'[^>]*>([^<]*)</text>", svg)
    assert y_ticks == ["0", "50", "100", "150", "200"]
    x_ticks = re.findall(r"<text class='tick x'[^>]*>([^<]*)</text>", svg)
    assert x_ticks[0] == "22:13:20"
    assert len(x_ticks) >= 2
    assert "aria-label='Backlog over the last 1 min: backlog now 144'" in svg
    assert svg.count("<polyline") == 1


def test_units_of_age_and_rates_and_a_legend_for_two_lines() -> None:
    ages = [(START + 60 * i, 30.0 * i) for i in range(10)]
    svg = line_chart("Oldest", AGE, [Series("age", ages)])
    assert re.findall(r"class='tick y'[^>]*>([^<]*)<", svg)[-1] == "8 min"  # 2 min a tick
    rates = line_chart(
        "Rates",
        PER_SECOND,
        [Series("delivered", ages), Series("acked", ages[1:], "line2")],
    )
    assert ">messages/s</text>" in rates
    assert ">delivered</text>" in rates
    assert ">acked</text>" in rates


def test_too_few_samples_say_so_and_names_are_escaped() -> None:
    empty = line_chart("<Backlog>", MESSAGES, [Series("b", [(START, 1.0)])])
    assert "Collecting" in empty
    assert "&lt;Backlog&gt;" in empty
    assert "<svg" not in empty
    assert "collecting" in sparkline([], "backlog")
    spark = sparkline([(START, 3.0), (START + 5, 1.0)], "backlog (messages)")
    assert "peak 3, now 1" in spark
