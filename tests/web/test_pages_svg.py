"""The dashboard's charts: a metric's history against its threshold band, and an A/A
false-positive rate against its binomial band."""

from __future__ import annotations

import re

from hairline.web.health import AaRun, fpr_over_time
from hairline.web.pagedata import HistoryPoint, relative_threshold
from hairline.web.svg import fpr_svg, history_svg


def _point(eid: int, effect: float | None, label: str = "no change") -> HistoryPoint:
    return HistoryPoint(
        experiment_id=eid, at=float(eid), candidate="B", label=label, relative_effect=effect,
        ci_low=None if effect is None else effect - 0.01,
        ci_high=None if effect is None else effect + 0.01,
        threshold_rel=0.02, direction="higher-is-worse",
    )  # fmt: skip


def test_history_draws_each_experiment_linked_with_its_interval_and_band() -> None:
    svg = history_svg("cpu", [_point(3, 0.001), _point(5, 0.05, "regression"), _point(9, None)])
    assert svg.startswith("<svg")
    # Two effects drawn (the third had none), each a link to its experiment.
    assert re.findall(r'href="/experiments/(\d+)"', svg) == ["3", "5"]
    assert svg.count("<circle") == 2 and "#b91c1c" in svg  # the regression in red
    # Each experiment's threshold band (grey within, red on the worse side) stands behind.
    assert svg.count('fill="#e5e7eb" opacity') == 3 and svg.count('fill="#fee2e2"') == 3
    assert "#3" in svg and "#9" in svg


def test_history_escapes_text_and_says_when_there_is_nothing() -> None:
    assert "<svg" not in history_svg("cpu", [])
    svg = history_svg("<b>cpu</b>", [_point(1, 0.0)])
    assert "<b>" not in svg and "&lt;b&gt;cpu&lt;/b&gt;" in svg


def test_a_relative_threshold_is_read_from_a_verdict_row_and_an_absolute_one_is_not() -> None:
    assert relative_threshold("0.02 rel") == 0.02
    assert relative_threshold("5") is None
    assert relative_threshold("nonsense rel") is None


def test_fpr_chart_marks_windows_above_their_band_in_red() -> None:
    labels = ["no change"] * 10 + ["regression"] * 4
    runs = [AaRun(i, float(i), label) for i, label in enumerate(labels)]
    points = fpr_over_time(runs, alpha=0.05, window=10)
    svg = fpr_svg("cpu", points, 0.05)
    assert "<polygon" in svg and "alpha 0.05" in svg
    red = svg.count('fill="#b91c1c"')
    assert red == sum(p.above_band for p in points) > 0
    assert "<svg" not in fpr_svg("cpu", (), 0.05)


def titles(svg: str) -> list[str]:
    return re.findall(r'<text class="axis-title"[^>]*>([^<]*)</text>', svg)


def test_both_charts_say_what_their_axes_measure_and_in_which_unit() -> None:
    history = history_svg("cpu", [_point(3, 0.001), _point(5, 0.05, "regression")])
    assert titles(history) == ["A/B experiment (oldest left)", "relative effect (%)"]
    runs = [AaRun(i, float(i), "no change") for i in range(5)]
    fpr = fpr_svg("cpu", fpr_over_time(runs, alpha=0.05, window=10), 0.05)
    assert titles(fpr) == ["A/A run (oldest left)", "false positives (%)"]
    # Drawn about as wide as the page's column (1,132 px at 1,300): its text is not shrunk.
    assert 'viewBox="0 0 1100 ' in history and 'viewBox="0 0 1100 ' in fpr
