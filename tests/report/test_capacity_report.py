"""Capacity mode in the reports: each arm's knee with its interval, and the curve."""

from __future__ import annotations

import io
import json
import math

import pytest
from report_fixture import make_report
from rich.console import Console

from hairline.report.context import (
    CapacityCurve,
    CurvePoint,
    arm_capacities,
    capacity_text,
    experiment_json,
)
from hairline.report.html import render_html
from hairline.report.terminal import print_experiment
from schema_check import check_schema


def curve(arm: str, batch: int, knee: float) -> CapacityCurve:
    """A search that probed 1 s at half, the knee and 10% over, then confirmed the knee."""
    return CapacityCurve(
        arm=arm,
        trial=batch // 2,
        batch=batch % 2,
        max_rate_per_s=knee,
        slo_p99_ms=20.0,
        stopped_by="slo",
        points=(
            CurvePoint(knee / 2, 2.0, knee / 2, 1.0, passed=True),
            CurvePoint(knee * 1.1, 80.0, knee, 1.0, passed=False),
            CurvePoint(knee, 15.0, knee, 1.0, passed=True),
            CurvePoint(knee, 18.0, knee, 10.0, passed=True),
            CurvePoint(knee * 1.2, math.nan, 0.0, 1.0, passed=False),
        ),
    )


CURVES = tuple(
    [curve("A", b, 1000 + 10 * b) for b in range(4)]
    + [curve("B", b, 900 + 10 * b) for b in range(4)]
)


def test_each_arm_gets_its_mean_knee_with_a_t_interval() -> None:
    a, b = arm_capacities(make_report(mode="capacity", curves=CURVES))

    assert (a.arm, b.arm) == ("A", "B")
    assert a.max_throughput_per_s == 1015.0 and a.batches == 4
    # t(0.975, 3) = 3.182; sd of 1000..1030 by 10 = 12.91.
    assert a.high_per_s - a.max_throughput_per_s == pytest.approx(3.182 * 12.91 / 2, rel=0.01)
    assert capacity_text(a).startswith("1,015 requests/s (95% CI 994 to 1,036, 4 batches)")
    one = arm_capacities(make_report(curves=CURVES[:1]))[0]
    assert capacity_text(one) == "1,000 requests/s (1 batch)"


def test_the_terminal_names_the_mode_and_each_arms_capacity() -> None:
    out = io.StringIO()
    print_experiment(make_report(mode="capacity", curves=CURVES), Console(file=out, width=200))

    text = out.getvalue()
    assert "capacity" in text
    assert "capacity A" in text and "1,015 requests/s" in text
    assert "capacity B" in text and "915 requests/s" in text


def test_the_json_report_has_the_mode_capacities_and_curves() -> None:
    data = json.loads(json.dumps(experiment_json(make_report(mode="capacity", curves=CURVES))))
    check_schema("experiment-report", data)

    assert data["mode"] == "capacity"
    assert [c["arm"] for c in data["capacity"]] == ["A", "B"]
    assert data["capacity"][1]["max_throughput_per_s"] == 915.0
    assert len(data["curves"]) == 8 and data["curves"][0]["points"][4]["p99_ms"] is None


def test_the_html_report_draws_each_arms_curve_with_its_knees() -> None:
    page = render_html(make_report(mode="capacity", curves=CURVES))

    assert "Capacity: latency against throughput" in page
    assert "SLO p99 20 ms" in page
    assert page.count("knee, trial") == 8
    assert "A knee, trial 1 batch 1: 1,000/s" in page
    # A probe nothing answered has no point on a log scale.
    assert page.count("<circle") == 8 * 4 + 2  # the points, and the legend's two


def test_reports_outside_capacity_mode_have_no_capacity_section() -> None:
    report = make_report()

    assert "Capacity:" not in render_html(report)
    assert experiment_json(report)["capacity"] == []
