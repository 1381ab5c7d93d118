"""lab/capacity.py's pure parts: the search's settings from a file, a probe from intervals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hairline.config import load_experiment
from hairline.engine import IntervalStats, IntervalTarget
from hairline.lab.capacity import capacity_settings, probe_of

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service" / "capacity.toml"


def interval(
    requests: int, p99_us: float, *, errors: int = 0, late: int = 0, dropped: int = 0
) -> IntervalStats:
    target = IntervalTarget(requests, errors, requests, requests * 4.0, p99_us / 2, p99_us)
    return IntervalStats(0.0, 0.25, 4.0 * requests, {"arm": target}, scheduled=requests,
                         late_sends=late, dropped=dropped)  # fmt: skip


def test_the_example_gives_the_searchs_settings() -> None:
    settings = capacity_settings(load_experiment(EXAMPLE))

    assert settings.slo_p99_ms == 20 and settings.probe_s == 0.5
    assert settings.start_rate_per_s == 1000 and settings.confirm_s == 3
    assert settings.tolerance == 0.02 and settings.max_rate_per_s is None


def test_a_probe_weighs_each_intervals_p99_by_its_responses() -> None:
    probe = probe_of([interval(100, 2000.0), interval(300, 6000.0)], 1600.0, 0.5)

    assert probe.p99_ms == pytest.approx((100 * 2 + 300 * 6) / 400)
    assert probe.served_per_s == pytest.approx(400 / 0.5)
    assert probe.duration_s == 0.5 and probe.cpu_utilization == 0.5
    assert probe.valid and probe.note == ""


def test_errors_count_against_the_responses_and_nothing_answered_is_nan() -> None:
    assert probe_of([interval(100, 1000.0, errors=5)], 400.0, None).error_rate == 0.05
    assert math.isnan(probe_of([interval(0, math.nan)], 400.0, None).p99_ms)


def test_a_generator_that_fell_behind_makes_the_probe_invalid() -> None:
    probe = probe_of([interval(100, 1000.0), interval(100, 1000.0, late=5)], 800.0, None)

    assert not probe.valid
    assert "5 of 200 sends late" in probe.note
    # Judged over the probe: one late send in one interval of four is not 1%.
    assert probe_of(
        [interval(100, 1000.0, late=1 if i == 0 else 0) for i in range(4)], 1600.0, None
    ).valid
    assert not probe_of([interval(100, 1000.0, dropped=1)], 400.0, None).valid
