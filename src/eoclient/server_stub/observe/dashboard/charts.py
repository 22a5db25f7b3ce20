"""The dashboard's charts: inline SVG line charts with a time axis, a value axis and units.

Pure functions of the samples, rendered on the server (nothing is fetched or drawn in the
browser). A chart is a plot area framed by a value axis on the left, ticked at round values
from 0 up to a round maximum above the highest point (so the scale reads at a glance and
the line never touches the top), and a time axis below, ticked at round clock times in UTC
(the server's samples are UTC; the browser's zone is unknown to the server). Every label is
text in the SVG, so a screen reader and a search in the page find it; each chart also has
an ``aria-label`` saying what it shows and its latest value.
"""

from __future__ import annotations

import datetime
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Round steps for the time axis, in seconds: the first that gives at most MAX_TIME_TICKS.
TIME_STEPS = (5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200)
MAX_TIME_TICKS = 6
VALUE_TICKS = 4  # intervals on the value axis (5 labels, 0 included)

# Room around the plot for the axes' labels, in SVG units (px at 100 %).
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 26, 40


@dataclass(frozen=True)
class Series:
    """One line: its legend label and its ``(time, value)`` points, oldest first."""

    label: str
    points: Sequence[tuple[float, float]]
    css: str = "line1"


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is >= ``value`` (> 0)."""
    if value <= 0:
        return 1.0
    magnitude = 10 ** math.floor(math.log10(value))
    for factor in (1, 2, 2.5, 5, 10):
        if factor * magnitude >= value * (1 - 1e-9):
            return float(factor * magnitude)
    return float(10 * magnitude)  # pragma: no cover - the loop ends at 10


def value_axis_top(highest: float, *, whole: bool = False, steps: Sequence[float] = ()) -> float:
    """A round top for the value axis: each of its VALUE_TICKS steps a round number (a
    whole one for counts: no tick says 2.5 messages; one of ``steps`` when given: a
    duration ticks at 30 s or 2 min, not at 100 s)."""
    if highest <= 0:
        return float(VALUE_TICKS) if whole else 1.0
    wanted = highest / VALUE_TICKS
    step = next((float(s) for s in steps if s >= wanted), 0.0) or nice_ceiling(wanted)
    if whole:
        step = float(math.ceil(step))
    return step * VALUE_TICKS


def time_ticks(start: float, end: float) -> list[float]:
    """Round UTC times within [start, end], at most MAX_TIME_TICKS of them; the two ends
    when fewer than two round times fall within (a span of a few seconds)."""
    span = max(end - start, 1.0)
    step = next((s for s in TIME_STEPS if span / s <= MAX_TIME_TICKS), TIME_STEPS[-1])
    first = math.ceil(start / step) * step
    ticks = [float(first + i * step) for i in range(int((end - first) // step) + 1)]
    return ticks if len(ticks) >= 2 else [start, end]


def clock(at: float, with_seconds: bool) -> str:
    moment = datetime.datetime.fromtimestamp(at, datetime.UTC)
    return moment.strftime("%H:%M:%S" if with_seconds else "%H:%M")


def count_label(value: float) -> str:
    """A count for an axis: 0, 250, 1.5k, 2M."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:g}M"
    if value >= 1000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def seconds_label(value: float) -> str:
    """A duration for an axis: 45 s, 2.5 min, 1.5 h."""
    if value >= 3600:
        return f"{value / 3600:g} h"
    if value >= 60:
        return f"{value / 60:g} min"
    return f"{value:g} s"


def rate_label(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Unit:
    """How a chart's values read: the axis caption and each tick's text."""

    caption: str  # "messages", "age", "messages/s"
    tick: Callable[[float], str]
    whole: bool = False  # counts: ticks at whole numbers
    steps: Sequence[float] = ()  # the round steps of this unit, if not 1, 2, 2.5, 5 x 10^k


MESSAGES = Unit("messages", count_label, whole=True)
AGE = Unit("age", seconds_label, steps=(1, 2, *TIME_STEPS, 14400, 28800, 86400))
PER_SECOND = Unit("messages/s", rate_label)


def line_chart(
    title: str,
    unit: Unit,
    series: Sequence[Series],
    *,
    width: int = 640,
    height: int = 200,
    chart_id: str = "",
) -> str:
    """An SVG line chart of ``series`` over their common time span, or the empty state."""
    points = [p for s in series for p in s.points]
    id_attribute = f" id={_e(chart_id)}" if chart_id else ""
    if len({t for t, _ in points}) < 2:
        return (
            f"<figure class='chart empty'{id_attribute}><figcaption>{_e(title)}</figcaption>"
            "<p class=muted>Collecting: the server samples every 5 s; the first line "
            "appears after two samples.</p></figure>"
        )
    start = min(t for t, _ in points)
    end = max(t for t, _ in points)
    top = value_axis_top(max(v for _, v in points), whole=unit.whole, steps=unit.steps)
    plot_w, plot_h = width - LEFT - RIGHT, height - TOP - BOTTOM

    def x(at: float) -> float:
        return LEFT + (at - start) / (end - start) * plot_w

    def y(value: float) -> float:
        return TOP + plot_h - value / top * plot_h

    parts = [
        f"<rect class=plot x={LEFT} y={TOP} width={plot_w} height={plot_h} />",
    ]
    for i in range(VALUE_TICKS + 1):
        value = top * i / VALUE_TICKS
        parts.append(
            f"<line class=grid x1={LEFT} x2={LEFT + plot_w} y1={y(value):.1f} y2={y(value):.1f} />"
            f"<text class='tick y' x={LEFT - 6} y={y(value) + 4:.1f}>{_e(unit.tick(value))}</text>"
        )
    with_seconds = end - start < 600
    for at in time_ticks(start, end):
        # A label at an end of the axis is aligned to it, so it stays inside the chart.
        anchor = "start" if x(at) - LEFT < 30 else "end" if LEFT + plot_w - x(at) < 30 else ""
        style = f" style='text-anchor:{anchor}'" if anchor else ""
        parts.append(
            f"<line class=grid x1={x(at):.1f} x2={x(at):.1f} y1={TOP} y2={TOP + plot_h} />"
            f"<text class='tick x' x={x(at):.1f} y={TOP + plot_h + 16}{style}>"
            f"{_e(clock(at, with_seconds))}</text>"
        )
    parts.append(
        f"<text class='axis-label x' x={LEFT + plot_w / 2:.1f} y={height - 4}>time (UTC)</text>"
        f"<text class='axis-label y' x=14 y={TOP + plot_h / 2:.1f} "
        f"transform='rotate(-90 14 {TOP + plot_h / 2:.1f})'>{_e(unit.caption)}</text>"
    )
    legend_x = LEFT
    for line in series:
        if len(line.points) >= 2:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in line.points)
            parts.append(f"<polyline class='{_e(line.css)}' points='{path}' />")
        elif line.points:
            t, v = line.points[0]
            parts.append(f"<circle class='{_e(line.css)}' cx={x(t):.1f} cy={y(v):.1f} r=2 />")
        if len(series) > 1:
            parts.append(
                f"<rect class='key {_e(line.css)}' x={legend_x} y=8 width=12 height=4 />"
                f"<text class=legend x={legend_x + 16} y=14>{_e(line.label)}</text>"
            )
            legend_x += 24 + 7 * len(line.label)
    latest = "; ".join(
        f"{s.label} now {unit.tick(round(s.points[-1][1], 2))}" for s in series if s.points
    )
    label = f"{title} over the last {seconds_label(round(end - start))}: {latest}"
    return (
        f"<figure class=chart{id_attribute}><figcaption>{_e(title)}</figcaption>"
        f"<svg viewBox='0 0 {width} {height}' width={width} height={height} role=img "
        f"aria-label='{_e(label)}'><title>{_e(label)}</title>{''.join(parts)}</svg></figure>"
    )


def sparkline(values: Sequence[tuple[float, float]], what: str, width: int = 160) -> str:
    """A row's small chart: the shape of the last hour, its peak and latest value in words
    (the detail pages have the axes)."""
    height = 32
    if len(values) < 2:
        return "<span class=muted>collecting…</span>"
    start, end = values[0][0], values[-1][0]
    top = max(v for _, v in values) or 1
    span = (end - start) or 1.0
    points = " ".join(
        f"{(t - start) / span * width:.1f},{height - v / top * (height - 2) - 1:.1f}"
        for t, v in values
    )
    peak = count_label(max(v for _, v in values))
    label = (
        f"{what} over the last {seconds_label(round(end - start))}, peak {peak}, "
        f"now {count_label(values[-1][1])}"
    )
    return (
        f"<svg class=spark width={width} height={height} role=img aria-label='{_e(label)}'>"
        f"<title>{_e(label)}</title><polyline class=line1 points='{points}' /></svg>"
    )
