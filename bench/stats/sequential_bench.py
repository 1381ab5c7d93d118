"""The sequential design: levels, family-wise false positives, power and expected trials.

``[design] trials = "auto"``: after every trial from the first look on, the fallback model
(paired t up to 4 trials, trimmed t from 5) at one calibrated level per look
(``hairline.stats.sequential.look_alpha``), the verdict rule, stop when settled
(``sequential_outcomes``). Printed:

1. the per-look level for a few designs, against Bonferroni;
2. the share of A/A experiments flagged (a regression or an improvement) without a
   threshold, where only a significant look stops an experiment, so that it is the
   family-wise rate: per-trial differences normal, and lab batches (lognormal, one bad batch
   of B or of either arm; ``simulate_lab_batches``); and for comparison the rate when every
   look uses alpha itself;
3. for per-trial spreads of 0.5, 1 and 2 thresholds and true regressions of 0, 1, 1.5 and 2
   thresholds: how often the procedure ends on regression, no change or unsettled at
   max_trials, the mean trials it ran, and the regression rate of a fixed design that
   always runs max_trials and analyses once at alpha.

Run: .venv/bin/python bench/stats/sequential_bench.py [--sims 4000 | --quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from hairline.stats.models import per_trial_fallback
from hairline.stats.sequential import FIRST_LOOK, look_alpha, looks, sequential_outcomes
from hairline.stats.simulate import Outlier, simulate_lab_batches
from hairline.stats.trialcore import per_trial_decision
from hairline.stats.verdict import REGRESSION, classify

ALPHA = 0.05
THETA = 0.01
MAX_TRIALS = 15
DESIGNS = ((3, 7), (3, 10), (3, 15), (5, 15), (3, 30))


def fixed_design_regressions(ones: np.ndarray, b: np.ndarray) -> float:
    """One analysis after all trials, at alpha: the share labelled regression."""
    n = b.shape[-1]
    decision = per_trial_decision(per_trial_fallback(n), ones, b, ALPHA)
    lo, hi = decision.ci_rel
    code = classify(decision.effect_rel, lo, hi, decision.p_value, alpha=ALPHA, theta=THETA)
    return float(np.mean(code == REGRESSION))


def naive_rate(ones: np.ndarray, b: np.ndarray) -> float:
    flagged = np.zeros(len(b), dtype=bool)
    for n in looks(FIRST_LOOK, b.shape[-1]):
        p = per_trial_decision(per_trial_fallback(n), ones[:, :n], b[:, :n], ALPHA).p_value
        flagged |= p < ALPHA
    return float(np.mean(flagged))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, help="simulated experiments per row (default 4000)")
    parser.add_argument("--quick", action="store_true", help="400 experiments (harness check)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench/out/stats_sequential.json"))
    args = parser.parse_args()
    sims = args.sims or (400 if args.quick else 4000)
    started = time.monotonic()
    rng = np.random.default_rng(args.seed)
    payload: dict[str, object] = {"alpha": ALPHA, "threshold": THETA, "sims": sims}

    levels = {
        f"{first}-{last}": {
            "look_alpha": look_alpha(ALPHA, first, last),
            "bonferroni": ALPHA / len(looks(first, last)),
        }
        for first, last in DESIGNS
    }
    payload["levels"] = levels
    print(f"per-look level at alpha {ALPHA} (Bonferroni)")
    for name, found in levels.items():
        print(f"  looks {name}: {found['look_alpha']:.4f} ({found['bonferroni']:.4f})")

    ones = np.ones((sims, MAX_TRIALS))
    normal = 1.0 + 0.01 * rng.standard_normal((sims, MAX_TRIALS))
    family: dict[str, float] = {"normal, every look at alpha": naive_rate(ones, normal)}
    runs: list[tuple[str, np.ndarray, np.ndarray]] = [("normal", ones, normal)]
    outliers: tuple[Outlier, ...] = ("none", "against", "random")
    for outlier in outliers:
        batches = simulate_lab_batches(rng, experiments=sims, trials=MAX_TRIALS, outlier=outlier)
        means = batches.mean(axis=-2)
        runs.append((f"lab batches, outlier {outlier}", means[..., 0], means[..., 1]))
    for name, a, b in runs:
        found = sequential_outcomes(a, b, threshold=0.0, alpha=ALPHA)
        family[name] = found.regression + found.improvement
    payload["aa_flagged"] = family
    print(f"A/A experiments flagged, looks {FIRST_LOOK} to {MAX_TRIALS}, no threshold")
    for name, rate in family.items():
        print(f"  {name}: {rate:.1%}")

    table = []
    print(
        f"threshold {THETA:.0%}, looks {FIRST_LOOK} to {MAX_TRIALS}: sd/threshold, "
        "effect/threshold -> regression, no change, unsettled, mean trials | fixed 15 trials"
    )
    for spread in (0.5, 1.0, 2.0):
        noise = spread * THETA * rng.standard_normal((sims, MAX_TRIALS))
        for effect in (0.0, 1.0, 1.5, 2.0):
            b = 1.0 + effect * THETA + noise
            found = sequential_outcomes(ones, b, threshold=THETA, alpha=ALPHA)
            fixed = fixed_design_regressions(ones, b)
            row = {
                "sd_over_threshold": spread,
                "effect_over_threshold": effect,
                "regression": found.regression,
                "no_change": found.no_change,
                "unsettled": found.unsettled,
                "mean_trials": found.mean_trials,
                "fixed_regression": fixed,
            }
            table.append(row)
            print(
                f"  {spread:3.1f} {effect:3.1f}: {found.regression:6.1%} {found.no_change:6.1%} "
                f"{found.unsettled:6.1%} {found.mean_trials:5.1f} | {fixed:6.1%}"
            )
    payload["outcomes"] = table
    print(f"{sims} experiments per row, {time.monotonic() - started:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
