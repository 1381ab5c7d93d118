"""The calibration's search, step by step (pure), on made-up cost curves."""

from __future__ import annotations

import pytest

from hairline.lab.calibrate import (
    HEADROOM,
    NEIGHBOUR,
    CalibrationStep,
    calibration_failure,
    candidate_rates,
    chosen_rate,
    next_rate,
    servable_rate,
)


def step(rate: float, utilization: float, passed: bool = True) -> CalibrationStep:
    return CalibrationStep(rate, utilization, utilization / rate * 1e9, passed)


def run_search(cost_us: float, *, ceiling: float = 1e9, target: float = 0.6) -> list[float]:
    """The rates tried against a service whose cost per request falls with load (wake-ups
    cost more when idle), and which spoils its load above ``ceiling``."""
    steps: list[CalibrationStep] = []
    rate: float | None = 100.0
    while rate is not None and len(steps) < 7:
        busy = rate * cost_us * 1e-6 * (1 + 0.5 / (1 + rate / 500))
        steps.append(step(rate, busy, passed=rate < ceiling))
        rate = next_rate(steps, target)
    final = chosen_rate(steps, target)
    assert final is not None
    return [s.rate_per_s for s in steps] + [final]


def test_the_search_settles_within_five_percent_of_the_target_in_a_few_steps() -> None:
    rates = run_search(cost_us=400)
    final = rates[-1]
    busy = final * 400e-6 * (1 + 0.5 / (1 + final / 500))
    assert abs(busy / 0.6 - 1) < 0.05
    assert len(rates) - 1 <= 5


def test_a_rate_the_engine_or_service_cannot_take_caps_the_answer() -> None:
    rates = run_search(cost_us=100, ceiling=3000)
    assert rates[-1] < 3000
    # It searched between the last good rate and the failed one instead of giving up.
    assert any(r < 3000 for r in rates[:-1])


def test_the_first_step_already_on_target_stops_at_once() -> None:
    assert next_rate([step(100, 0.61)], 0.6) is None
    assert chosen_rate([step(100, 0.61)], 0.6) is not None


def test_nothing_that_passes_halves_the_rate_and_then_gives_no_answer() -> None:
    failed = [step(100, 0.0, passed=False)]
    assert next_rate(failed, 0.6) == 50
    assert chosen_rate(failed, 0.6) is None


def test_the_servable_rate_is_the_highest_that_passed_below_every_failure() -> None:
    steps = [step(400, 0.1), step(1600, 0.4), step(3600, 0.0, passed=False), step(2400, 0.6)]
    assert servable_rate(steps) == 2400
    # A pass above a failure does not count: where the load broke lies below it.
    assert servable_rate([*steps, step(4000, 0.9)]) == 2400
    assert servable_rate([step(100, 0.0, passed=False)]) is None


def test_candidates_run_from_about_30_percent_busy_to_just_under_the_servable_rate() -> None:
    steps = [step(400, 0.1), step(1600, 0.4), step(3600, 0.0, passed=False), step(3000, 0.75)]
    low, middle, high = candidate_rates(steps)
    assert low == 1200  # 1,600/s was 40% busy: 30% at 1,200/s
    assert high == 3000 * HEADROOM
    assert middle == pytest.approx((low * high) ** 0.5, abs=1)


def test_where_the_engine_is_the_limit_the_candidates_still_differ() -> None:
    """The arm barely busy at the highest servable rate: 30% busy lies beyond it."""
    steps = [step(400, 0.02), step(1600, 0.08), step(6400, 0.0, passed=False), step(3200, 0.15)]
    low, _, high = candidate_rates(steps)
    assert high == pytest.approx(3200 * HEADROOM)
    assert low == pytest.approx(high / 2, abs=1)
    assert candidate_rates([step(100, 0.0, passed=False)]) == ()


def test_a_failed_calibration_says_what_each_step_measured_and_what_to_change() -> None:
    busy = "host 0's CPUs with the engine 97% busy (limit 90%)"
    steps = [step(400, 0.0, passed=False), step(200, 0.0, passed=False)]
    steps = [CalibrationStep(s.rate_per_s, 0.0, 0.0, False, busy) for s in steps]
    message, hint = calibration_failure("A", 400, steps, [])
    assert message == (
        f"calibration: no rate from 400/s down kept A's load valid (400/s: {busy}; 200/s: {busy})"
    )
    assert "set [load] rate_per_s" in hint


def test_a_neighbour_on_the_lab_cpus_is_named_and_a_lower_rate_is_not_suggested() -> None:
    crowded = f"host 1's CPUs 100% busy (limit 90%), 97% of it {NEIGHBOUR}"
    message, hint = calibration_failure(
        "A", 100, [CalibrationStep(100, 0.02, 1e5, False, crowded)], []
    )
    assert message.startswith(
        "calibration: no rate from 100/s down kept A's load valid: another process kept the "
        "lab's CPUs busy (100/s: host 1's CPUs 100% busy (limit 90%), 97% of it not the arm's"
    )
    assert "a lower rate would not help" in hint
