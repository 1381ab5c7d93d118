"""The Kraken report's charts: round ticks from 0, and legends with room for their names
(the first chart's read "measurec" and "theoretica", its time axis 0.22, 4.22 s)."""

from __future__ import annotations

import re

import pytest

from hairline.kraken.charts import LEGEND_CHAR_PX, line_chart, nice_ticks, tick_label


@pytest.mark.parametrize(
    ("low", "high", "expected"),
    [
        (0.0, 23.7, [0, 5, 10, 15, 20]),
        (0.22, 4.22, [1, 2, 3, 4]),
        (0.0, 1234.0, [0, 250, 500, 750, 1000]),
        (0.0, 100.0, [0, 20, 40, 60, 80, 100]),
        (0.0, 0.3, [0, 0.1, 0.2, 0.3]),
        (0.0, 0.83, [0, 0.2, 0.4, 0.6, 0.8]),
    ],
)
def test_ticks_are_round_and_within_the_range(
    low: float, high: float, expected: list[float]
) -> None:
    assert nice_ticks(low, high) == expected


def test_a_tick_label_has_no_binary_dust() -> None:
    assert [tick_label(t) for t in nice_ticks(0.0, 0.3)] == ["0", "0.1", "0.2", "0.3"]
    assert tick_label(1250.0) == "1,250"


def labels(svg: str) -> list[tuple[float, str]]:
    return [(float(x), text) for x, text in re.findall(r'<text x="([\d.]+)"[^>]*>([^<]*)</', svg)]


def test_a_time_axis_starts_at_0_and_reads_round_seconds() -> None:
    # A test's first sample comes 0.22 s in and one every 2 s after.
    points = [(0.22 + 2 * i, 10.0 * i) for i in range(12)]
    svg = line_chart("Share", [("share %", "#000", points)], x_label="seconds",
                     y_label="%", y_max=100.0)  # fmt: skip
    bottom = re.findall(r'y="236"[^>]*>([^<]*)</', svg)  # the time axis's tick labels
    assert bottom == ["0", "5", "10", "15", "20"]
    left = re.findall(r'text-anchor="end">([^<]*)</', svg)
    assert left == ["0", "20", "40", "60", "80", "100"]


def test_without_a_fixed_top_the_value_axis_ends_on_a_round_value_above_the_data() -> None:
    svg = line_chart("Load", [("served", "#000", [(0.0, 0.0), (10.0, 992.0)])],
                     x_label="s", y_label="req/s")  # fmt: skip
    left = [float(v.replace(",", "")) for v in re.findall(r'text-anchor="end">([^<]*)</', svg)]
    assert left[0] == 0 and left[-1] >= 992 * 1.05 and left[-1] in (1100, 1200, 1250)


@pytest.mark.parametrize(
    "names", [("measured", "theoretical"), ("offered", "served"), ("a much longer series name",)]
)
def test_a_legend_beside_the_plot_has_room_for_its_longest_name(names: tuple[str, ...]) -> None:
    series = [(name, "#000", [(0.0, 1.0), (100.0, 2.0)]) for name in names]
    svg = line_chart("Measured against theoretical capacity", series,
                     x_label="offered load", y_label="served load")  # fmt: skip
    width = float(re.search(r'width="(\d+)"', svg)[1])  # type: ignore[index]
    legend = [(x, text) for x, text in labels(svg) if text in names]
    assert [text for _, text in legend] == list(names)
    for x, text in legend:
        assert x + LEGEND_CHAR_PX * len(text) <= width, text
    # The plot ends before the legend starts: no line runs under a name.
    plot_end = max(float(x) for x in re.findall(r'<line x1="60" x2="([\d.]+)"', svg))
    assert plot_end < min(x for x, _ in legend)


def test_with_level_bands_the_names_go_in_a_row_that_does_not_overlap() -> None:
    bands = [(0.0, 10.0, "#eee", "BOLD"), (10.0, 20.0, "#ddd", "NOMORE")]
    series = [("worker_utilization", "#000", [(0.0, 1.0)]), ("queue_delay", "#111", [(1, 2)])]
    svg = line_chart("Health", series, x_label="s", y_label="v", bands=bands, y_max=30.0)
    width = float(re.search(r'width="(\d+)"', svg)[1])  # type: ignore[index]
    row = [(x, text) for x, text in labels(svg) if text in ("worker_utilization", "queue_delay")]
    (x1, first), (x2, _) = row
    assert x1 + LEGEND_CHAR_PX * len(first) < x2
    for x, text in labels(svg):
        if text in ("BOLD", "NOMORE"):
            assert x + LEGEND_CHAR_PX * len(text) <= width
