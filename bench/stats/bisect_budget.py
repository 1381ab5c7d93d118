#!/usr/bin/env python3
"""How often tests/lab/test_bisect_e2e.py's bisection fails when nothing is wrong.

The test bisects eight commits whose fifth adds 10% to a request's work (it reads 7-9% of
CPU per request) with a threshold and a number of trials a step. Its steps are fixed while
every verdict is right: commit 4 against 1 (no change), 6 and 5 against 1 (regression) and
5 against 4 (regression). It fails when the unchanged step reads "regression", a
regression step reads "no change" or "improvement", or an inconclusive step, run again
with twice the trials (stats/bisection.py), stays inconclusive after two repeats or the
repeats exceed the budget (four experiments and two). Each step is judged as the lab
judges it: the fallback model for its trial count (stats/models.per_trial_fallback), its
interval (stats/trialcore.per_trial_decision) and the verdict rule (stats/verdict.classify).

Per-trial differences (in % of A) come from a normal of a given sd, or are resampled from
the 40 per-trial differences of an A/A of the sample service at the test's settings
(1,000/s, 1 s batches, 2026-11-29, helpers' builds running beside it; centred, with both
signs): most within 1%, four of 40 off by 3-8%.

    python bench/stats/bisect_budget.py                        # the test's settings
    python bench/stats/bisect_budget.py --trials 4 --threshold 4 --bisections 20000

Prints one line per noise model: the share of failed bisections and of those that needed
a repeat. Seeded (``--seed``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from hairline.stats.models import per_trial_fallback  # noqa: E402
from hairline.stats.trialcore import per_trial_decision  # noqa: E402
from hairline.stats.verdict import (  # noqa: E402
    IMPROVEMENT,
    OPEN,
    REGRESSION,
    UNDEFINED,
    WITHIN,
    classify,
)

# The A/A's per-trial differences of cpu_ns_per_request, B against A, in % (trial order).
AA_DIFFERENCES_PCT = np.array([
    -1.07, -0.57, 7.8, 4.68, -0.25, -1.13, -0.21, -0.14, -0.41, -0.08, -0.37, -0.8, -0.06,
    0.08, 0.84, 1.97, 0.97, -0.72, -0.25, -0.36, -1.7, 0.36, 0.74, 2.95, -0.28, -0.74, -0.34,
    -0.13, -0.66, -0.87, 5.22, -0.1, -1.92, 1.66, -0.18, -2.3, 0.32, 1.59, -2.21, -0.75,
])  # fmt: skip
# The same A/A in a duet ([hosts] local_layout = "duet": both arms on CPU 0, the engine on
# CPU 1; 2026-11-29 18:20 UTC, nothing else running; 145 s): sd 0.84%, the largest 2.9%.
DUET_AA_DIFFERENCES_PCT = np.array([
    0.64, -0.49, -0.18, 0.99, 1.3, -0.71, 0.5, -0.28, -0.43, -0.87, 0.49, -0.45, 0.06, -0.23,
    -0.41, 1.09, -0.85, -0.25, 0.85, -0.08, 0.41, -0.82, 0.43, -0.78, -0.27, -0.05, -0.3,
    -1.82, 0.08, -0.69, 2.02, -0.57, -0.52, 2.89, 0.03, -0.09, 0.08, 0.54, 0.37, -0.2,
])  # fmt: skip
# The duet again, one batch a trial ([design] name = "request-balanced": the bisection
# test's settings since 2026-11-29; 22:21 UTC, nothing else running; 76 s): sd 1.61%, the
# largest 3.6%.
DUET_ONE_BATCH_AA_DIFFERENCES_PCT = np.array([
    1.1, -0.79, -3.49, 0.34, 1.64, 1.13, -1.07, 2.75, -2.5, -0.6, -0.95, -3.62, -1.16, 1.47,
    1.52, -0.43, -0.85, -0.48, 3.6, 0.6, -1.0, 0.5, -1.26, 0.7, -1.12, 0.25, 1.6, 1.38, -0.31,
    0.38, -1.0, 1.01, -2.04, 1.61, -0.23, 0.69, -0.04, 1.37, -1.17, 3.43,
])  # fmt: skip
REPEATS = 2  # stats/bisection.py: an inconclusive step runs again at most twice
BUDGET_REPEATS = 2  # --max-experiments' default: the clean count plus two
BASELINE = 100.0  # A's per-trial mean: differences in % are then absolute


def step_codes(differences: np.ndarray, threshold_pct: float, alpha: float) -> np.ndarray:
    """The verdict codes of steps with these per-trial differences (rows: steps)."""
    trials = differences.shape[-1]
    a = np.full(differences.shape, BASELINE)
    decision = per_trial_decision(per_trial_fallback(trials), a, a + differences, alpha)
    return classify(
        decision.effect_rel,
        decision.ci_rel[0],
        decision.ci_rel[1],
        decision.p_value,
        alpha=alpha,
        theta=threshold_pct / 100.0,
    )


def failure_rate(
    draw: np.ndarray | float,
    *,
    trials: int,
    threshold_pct: float,
    effect_pct: float,
    bisections: int,
    alpha: float,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """(failed, needed a repeat) shares over ``bisections`` simulated bisections; ``draw``
    is a normal sd in % or an array of differences to resample."""

    def differences(m: int) -> np.ndarray:
        if isinstance(draw, np.ndarray):
            return rng.choice(draw, (bisections, m))
        return rng.normal(0.0, draw, (bisections, m))

    failed = np.zeros(bisections, dtype=bool)
    repeats = np.zeros(bisections, dtype=int)
    for changed in (False, True, True, True):
        truth = effect_pct if changed else 0.0
        settled = np.zeros(bisections, dtype=bool)
        m = trials
        for attempt in range(REPEATS + 1):
            code = step_codes(differences(m) + truth, threshold_pct, alpha)
            wrong = np.isin(code, (WITHIN, IMPROVEMENT)) if changed else code == REGRESSION
            failed |= wrong & ~settled
            settled |= ~np.isin(code, (OPEN, UNDEFINED))
            if attempt < REPEATS:
                repeats += ~settled
            m *= 2
        failed |= ~settled
    failed |= repeats > BUDGET_REPEATS
    return float(failed.mean()), float((repeats > 0).mean())


def both_signs(differences: np.ndarray) -> np.ndarray:
    """An A/A's per-trial differences, centred and with both signs: its arms are the same,
    so a difference and its negative are equally likely (the split A/A's four outlying
    trials happened to be B's)."""
    centred = differences - differences.mean()
    return np.concatenate([centred, -centred])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=6, help="trials a step (default 6)")
    parser.add_argument("--threshold", type=float, default=5.0, help="threshold in %% (5)")
    parser.add_argument("--effect", type=float, default=7.5, help="culprit's effect in %%")
    parser.add_argument("--bisections", type=int, default=100_000)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--sds", default="1.5,2,2.5,3.2", help="normal sds in %% to try")
    args = parser.parse_args(argv)
    models: list[tuple[str, np.ndarray | float]] = [
        ("the 40-trial A/A, resampled", both_signs(AA_DIFFERENCES_PCT)),
        ("the duet's A/A, resampled", both_signs(DUET_AA_DIFFERENCES_PCT)),
        ("the duet, one batch a trial", both_signs(DUET_ONE_BATCH_AA_DIFFERENCES_PCT)),
    ]
    models += [(f"normal, sd {float(sd):g}%", float(sd)) for sd in args.sds.split(",")]
    print(
        f"bisection of 8 commits, culprit +{args.effect:g}%, {args.trials} trials a step, "
        f"threshold {args.threshold:g}%, {args.bisections} bisections, seed {args.seed}"
    )
    for name, draw in models:
        failed, repeated = failure_rate(
            draw,
            trials=args.trials,
            threshold_pct=args.threshold,
            effect_pct=args.effect,
            bisections=args.bisections,
            alpha=args.alpha,
            rng=np.random.default_rng(args.seed),
        )
        print(f"  {name:<30} failed {failed:.1e}   a repeat needed {repeated:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
