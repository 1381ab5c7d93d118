"""The verdict rule, one row of its table per case, and Holm / Benjamini–Hochberg."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from hairline.stats.data import Comparison
from hairline.stats.verdict import MetricRule, adjust_p_values, decide, verdicts

NAN = float("nan")


def comparison(effect_rel: float, ci_rel: tuple[float, float], p: float) -> Comparison:
    mean_a = 100.0
    return Comparison(
        model="welch-none",
        mean_a=mean_a,
        mean_b=mean_a * (1 + effect_rel),
        effect_abs=mean_a * effect_rel,
        effect_rel=effect_rel,
        ci_abs=(mean_a * ci_rel[0], mean_a * ci_rel[1]),
        ci_rel=ci_rel,
        p_value=p,
        alpha=0.05,
        n_a=100,
        n_b=100,
    )


@pytest.mark.parametrize(
    ("effect", "ci", "p", "threshold", "direction", "expected"),
    [
        # significant, worse, at least the threshold
        (0.03, (0.01, 0.05), 0.001, 0.01, "higher-is-worse", "regression"),
        # the same numbers are an improvement when lower is worse (throughput went up)
        (0.03, (0.01, 0.05), 0.001, 0.01, "lower-is-worse", "improvement"),
        (-0.03, (-0.05, -0.01), 0.001, 0.01, "higher-is-worse", "improvement"),
        (-0.03, (-0.05, -0.01), 0.001, 0.01, "lower-is-worse", "regression"),
        # significant but smaller than what matters, and the interval says so
        (0.002, (0.001, 0.003), 0.001, 0.01, "higher-is-worse", "no change"),
        # not significant, interval within ±threshold
        (0.001, (-0.004, 0.006), 0.5, 0.01, "higher-is-worse", "no change"),
        # not significant, but the interval reaches past the threshold
        (0.004, (-0.01, 0.018), 0.4, 0.01, "higher-is-worse", "inconclusive"),
        # significant, estimate under the threshold, interval above it
        (0.008, (0.002, 0.014), 0.01, 0.01, "higher-is-worse", "inconclusive"),
        # no threshold: significance alone decides
        (0.001, (0.0005, 0.0015), 0.01, 0.0, "higher-is-worse", "regression"),
        (0.001, (-0.02, 0.022), 0.9, 0.0, "higher-is-worse", "no change"),
        # the model could not decide
        (NAN, (NAN, NAN), NAN, 0.01, "higher-is-worse", "inconclusive"),
    ],
)
def test_rule_table(
    effect: float,
    ci: tuple[float, float],
    p: float,
    threshold: float,
    direction: str,
    expected: str,
) -> None:
    rule = MetricRule(threshold=threshold, direction=direction)  # type: ignore[arg-type]
    assert decide(comparison(effect, ci, p), rule).label == expected


def test_absolute_threshold_reads_the_absolute_effect() -> None:
    # +3% of 100 is +3 units: a regression against 2 units, no change against 10.
    found = comparison(0.03, (0.01, 0.05), 0.001)
    assert decide(found, MetricRule(threshold=2.0, kind="absolute")).label == "regression"
    assert decide(found, MetricRule(threshold=10.0, kind="absolute")).label == "no change"


def test_bad_rules_are_rejected() -> None:
    with pytest.raises(ValueError, match="fractions"):
        MetricRule(threshold=-0.01)
    with pytest.raises(ValueError, match="direction"):
        MetricRule(direction="up")  # type: ignore[arg-type]


def test_holm_by_hand() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max.
    adjusted = adjust_p_values(np.array([0.01, 0.04, 0.03, 0.005]), method="holm")
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_benjamini_hochberg_by_hand_and_against_scipy() -> None:
    # sorted times 4/1, 4/2, 4/3, 4/4 = 0.02, 0.02, 0.04, 0.04; running min from the top.
    p = np.array([0.01, 0.04, 0.03, 0.005])
    adjusted = adjust_p_values(p, method="bh")
    assert adjusted == pytest.approx([0.02, 0.04, 0.04, 0.02])
    many = np.random.default_rng(0).uniform(0, 0.2, 25)
    assert adjust_p_values(many, method="bh") == pytest.approx(sps.false_discovery_control(many))


def test_adjustment_caps_at_one_and_skips_nan() -> None:
    adjusted = adjust_p_values(np.array([0.6, NAN, 0.9]), method="holm")
    assert adjusted[0] == 1.0 and np.isnan(adjusted[1]) and adjusted[2] == 1.0


def test_verdicts_use_adjusted_p_values() -> None:
    comparisons = {
        "cpu": comparison(0.02, (0.005, 0.035), 0.02),
        "latency_p99": comparison(0.02, (0.004, 0.036), 0.03),
        "memory": comparison(0.0, (-0.001, 0.001), 0.9),
    }
    rules = {name: MetricRule(threshold=0.01) for name in comparisons}
    plain = verdicts(comparisons, rules)
    assert plain["cpu"].label == "regression" and plain["latency_p99"].label == "regression"
    holm = verdicts(comparisons, rules, correction="holm")
    assert holm["cpu"].p_adjusted == pytest.approx(0.06)
    assert holm["cpu"].label == "inconclusive"
    assert holm["memory"].label == "no change"
    assert holm["cpu"].threshold == 0.01 and holm["cpu"].direction == "higher-is-worse"


def test_rules_for_unknown_metrics_are_named() -> None:
    with pytest.raises(ValueError, match="cpu_tyop"):
        verdicts({"cpu": comparison(0.0, (-0.1, 0.1), 0.5)}, {"cpu_tyop": MetricRule()})


def test_two_equal_constant_arms_are_no_change_not_inconclusive() -> None:
    # An error rate of 0 in both arms: no test can run, and there is nothing to explain.
    import numpy as np

    from hairline.stats import MetricSample, get_model

    zeros = MetricSample(
        value=np.zeros(8), arm=np.tile([0, 1], 4).astype(np.int8), trial=np.repeat(np.arange(4), 2)
    )
    from hairline.stats import DegenerateDataWarning

    for model in ("welch-none", "permutation-none", "paired-t-none"):
        # Each model says why it has no statistic or no relative effect.
        with pytest.warns(DegenerateDataWarning, match=model):
            comparison = get_model(model)(
                zeros, alpha=0.05, rng=np.random.default_rng(0), history=None
            )
        verdict = decide(comparison, MetricRule(threshold=0.001, kind="absolute"))
        assert verdict.label == "no change", model
    ones_and_zeros = MetricSample(
        value=np.array([0.0] * 4 + [1.0] * 4), arm=np.repeat([0, 1], 4).astype(np.int8)
    )
    with pytest.warns(DegenerateDataWarning, match="both arms are constant"):
        comparison = get_model("welch-none")(
            ones_and_zeros, alpha=0.05, rng=np.random.default_rng(0), history=None
        )
    assert decide(comparison, MetricRule(threshold=0.001, kind="absolute")).label != "no change"
