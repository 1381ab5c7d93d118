"""Properties every model must have, whatever the data (hypothesis, derandomised)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hairline.stats.data import Comparison, MetricSample
from hairline.stats.models import run_model

HISTORY = [0.01, -0.02, 0.005, 0.0, -0.01, 0.015]
SETTINGS = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much],
)
# At least 6 rows per arm, so that every trial holds 2 of each: rows per request, which the
# outlier preprocessings need (they refuse one row per trial and arm, an aggregate).
arm_values = st.lists(
    st.floats(min_value=1.0, max_value=1000.0, allow_nan=False), min_size=6, max_size=25
)
scale_factors = st.floats(min_value=1e-3, max_value=1e3)
shifts = st.floats(min_value=-0.5, max_value=1e4)


def sample_of(a: list[float], b: list[float]) -> MetricSample:
    """Two arms; rows are dealt round-robin into three trials so every model can run."""
    trial = [i % 3 for i in range(len(a))] + [i % 3 for i in range(len(b))]
    return MetricSample.from_arrays(a + b, [0] * len(a) + [1] * len(b), trial=trial)


def run(name: str, sample: MetricSample) -> Comparison:
    return run_model(name, sample, rng=np.random.default_rng(0), history=HISTORY)


def informative(result: Comparison) -> bool:
    return math.isfinite(result.p_value) and abs(result.effect_abs) > 1e-9 * abs(result.mean_a)


SIGN_MODELS = [
    "t-test-none",
    "welch-none",
    "t-test-sqrt",
    "welch-outlier-cap",
    "t-test-outlier-elim",
    "permutation-none",
    "permutation-sqrt",
    "paired-t-none",
    "paired-t-sqrt",
    "ci-test",
]
SHIFT_MODELS = [
    "t-test-none",
    "welch-none",
    "welch-outlier-cap",
    "permutation-none",
    "paired-t-none",
    "ci-test",
]
SCALE_MODELS = [*SIGN_MODELS, "permutation-outlier-cap", "welch-sqrt"]


# The properties below skip (assume) uninformative draws, and the settings let hypothesis
# filter many of them; so a model that answered NaN to everything would pass them all
# vacuously. This pins each one to a finite answer on ordinary data first.
@pytest.mark.parametrize("name", sorted(set(SCALE_MODELS) | set(SHIFT_MODELS)))
def test_every_model_checked_below_answers_ordinary_data(name: str) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. A finite answer on 12
    rows per arm does not depend on the draw."""
    rng = np.random.default_rng(3)
    a = list(100 + rng.normal(0, 5, size=12))
    b = list(104 + rng.normal(0, 5, size=12))
    result = run(name, sample_of(a, b))
    # (Not the interval: an exact test over 3 trials cannot reach alpha, so its inverted
    # interval is unbounded, by design.)
    assert informative(result) and math.isfinite(result.effect_rel), result


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", SIGN_MODELS)
@SETTINGS
@given(a=arm_values, b=arm_values)
def test_swapping_arms_flips_the_sign(name: str, a: list[float], b: list[float]) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run, and the
    properties hold for every input (to rounding); deadline=None."""
    forward = run(name, sample_of(a, b))
    backward = run(name, sample_of(b, a))
    assume(informative(forward))
    assert math.copysign(1.0, backward.effect_abs) == -math.copysign(1.0, forward.effect_abs)
    assert math.copysign(1.0, backward.effect_rel) == -math.copysign(1.0, forward.effect_rel)
    if name.startswith(("t-test", "welch", "permutation", "paired-t")):
        assert backward.p_value == pytest.approx(forward.p_value, rel=1e-6, abs=1e-12)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", SHIFT_MODELS)
@SETTINGS
@given(a=arm_values, b=arm_values, shift=shifts)
def test_adding_a_constant_keeps_the_absolute_effect(
    name: str, a: list[float], b: list[float], shift: float
) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run, and the
    properties hold for every input (to rounding); deadline=None."""
    before = run(name, sample_of(a, b))
    after = run(name, sample_of([x + shift for x in a], [x + shift for x in b]))
    assume(math.isfinite(before.effect_abs))
    if name == "ci-test":
        # The ci-test is relative by design (history from runs at other levels combines):
        # its absolute effect is still mean(B) - mean(A).
        assert after.effect_abs == pytest.approx(before.effect_abs, abs=1e-6 * (1 + shift))
        return
    assert after.effect_abs == pytest.approx(before.effect_abs, abs=1e-6 * (1 + shift))
    assert after.p_value == pytest.approx(before.p_value, rel=1e-4, abs=1e-9)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name", SCALE_MODELS)
@SETTINGS
@given(a=arm_values, b=arm_values, factor=scale_factors)
def test_scaling_both_arms_keeps_the_relative_effect(
    name: str, a: list[float], b: list[float], factor: float
) -> None:
    """False failure: none: derandomised hypothesis draws the same examples on every run, and the
    properties hold for every input (to rounding); deadline=None."""
    before = run(name, sample_of(a, b))
    after = run(name, sample_of([x * factor for x in a], [x * factor for x in b]))
    assume(math.isfinite(before.effect_rel))
    assert after.effect_rel == pytest.approx(before.effect_rel, rel=1e-6, abs=1e-9)
    assert after.ci_rel == pytest.approx(before.ci_rel, rel=1e-6, abs=1e-9)
    assert after.p_value == pytest.approx(before.p_value, rel=1e-4, abs=1e-9)
