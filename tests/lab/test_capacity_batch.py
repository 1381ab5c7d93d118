"""lab/capacity.py's pure parts: the search's settings from a file, a probe from intervals."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from hairline.capacity.search import SearchSettings, probe_failure
from hairline.config import load_experiment
from hairline.engine import IntervalStats, IntervalTarget
from hairline.lab.capacity import capacity_settings, dither_fraction, failed_anyway, probe_of

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service" / "capacity.toml"


def interval(
    requests: int,
    p99_us: float,
    *,
    errors: int = 0,
    late: int = 0,
    dropped: int = 0,
    behind: int = 0,
) -> IntervalStats:
    target = IntervalTarget(requests, errors, requests, requests * 4.0, p99_us / 2, p99_us)
    return IntervalStats(0.0, 0.25, 4.0 * requests, {"arm": target}, scheduled=requests,
                         late_sends=late, dropped=dropped, behind=behind)  # fmt: skip


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
    probe = probe_of([interval(100, 1000.0), interval(100, 1000.0, behind=11)], 800.0, None)

    assert not probe.valid
    assert "11 of 200 sends left late by the engine's own pacer" in probe.note
    # Judged over the probe, with room for a busy machine's preemptions: 5 of an
    # interval's 100 sends behind, in one interval of four, is not 5% of the probe.
    assert probe_of(
        [interval(100, 1000.0, behind=5 if i == 0 else 0) for i in range(4)], 1600.0, None
    ).valid


def test_late_writes_and_drops_are_the_services_and_drops_count_as_errors() -> None:
    # Past the knee the service holds the connections: writes wait and the engine drops
    # at its in-flight limit while its pacer keeps time. The probe is valid, and fails.
    probe = probe_of([interval(100, 1000.0, late=40, dropped=25)], 400.0, None)

    assert probe.valid
    assert probe.error_rate == pytest.approx(25 / 125)


def test_a_probe_that_failed_the_slo_with_the_generator_behind_is_a_valid_failure() -> None:
    # A late generator sends less than scheduled, never more: a service that broke its
    # SLO at the load it got breaks it at the full load too.
    settings = SearchSettings(slo_p99_ms=20.0, start_rate_per_s=1000.0, confirm_s=2.0)
    overloaded = probe_of([interval(100, 150_000.0, behind=30)], 800.0, None)
    assert not overloaded.valid

    judged = failed_anyway(overloaded, settings)

    assert judged.valid and probe_failure(judged, settings) == "p99 150 ms > 20 ms"
    assert "the service failed at the load it got (p99 150 ms > 20 ms)" in judged.note
    # One that met the SLO with the generator behind still says nothing of the service.
    quick = probe_of([interval(100, 1000.0, behind=30)], 800.0, None)
    assert failed_anyway(quick, settings) == quick and not quick.valid


def test_each_arm_and_batch_gets_its_own_dither_the_same_on_every_run() -> None:
    """False failure: none: a hash, no randomness. 600 tags' fractions spread over [0, 1)
    as a uniform's do (the largest gap from its CDF 0.029, under the 0.055 of 1% at n=600)."""
    assert dither_fraction("t1b1a1", "A") == dither_fraction("t1b1a1", "A")
    assert dither_fraction("t1b1a1", "A") != dither_fraction("t1b1a1", "B")
    assert dither_fraction("t1b1a1", "A") != dither_fraction("t1b2a1", "A")
    fractions = sorted(
        dither_fraction(f"t{t}b{b}a{a}", arm)
        for t in range(1, 51) for b in (1, 2) for a in (1, 2, 3) for arm in "AB"
    )  # fmt: skip
    n = len(fractions)
    assert all(0.0 <= f < 1.0 for f in fractions)
    gap = max(max(abs((i + 1) / n - f), abs(i / n - f)) for i, f in enumerate(fractions))
    assert gap < 0.055
