"""One bad batch: the trimmed t-test against the paired t-test and the sign-flip test.

A local lab's batch-level metric (CPU per request): per trial two batches in which the arms
swap their CPU sets, a 5% trial level both arms share, 3% lognormal noise per batch
(``hairline.stats.simulate.simulate_lab_batches``). "One bad batch" puts one batch that ran
at 0.75 times its value into one random trial: of B, against a regression (as seen at
4,000 req/s: six of seven trials at +6%, one with a batch 25% below every other), or of
either arm at random. For each trial count it prints the false-positive rate at alpha 5%
(no effect) and the power at a +3% regression, clean and with the bad batch, of:

- sign-flip: the exact sign-flip test on per-trial mean differences (permutation-none);
- paired-t: the paired t-test on the same differences (paired-t-none);
- trimmed-t: Yuen's 20%-trimmed t-test on per-trial relative differences, its null
  calibrated for normal trials (trimmed-t-none).

The per-trial models are computed on arrays (``hairline.stats.trialcore``, equal to the
registered models; the sign-flip p-value is enumerated here).

Run: .venv/bin/python bench/stats/robust_bench.py [--sims 4000 | --quick] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from hairline.stats.simulate import Outlier, simulate_lab_batches
from hairline.stats.trialcore import per_trial_decision

ALPHA = 0.05
EFFECT = 0.03
TRIALS = range(3, 16)
CASES: tuple[tuple[str, float, Outlier], ...] = (
    ("A/A clean", 0.0, "none"),
    ("A/A bad B batch", 0.0, "against"),
    ("A/A bad batch", 0.0, "random"),
    ("+3% clean", EFFECT, "none"),
    ("+3% bad B batch", EFFECT, "against"),
    ("+3% bad batch", EFFECT, "random"),
)


def sign_flip_p(differences: np.ndarray) -> np.ndarray:
    m = differences.shape[-1]
    signs = np.array(list(itertools.product([-1.0, 1.0], repeat=m)))
    observed = np.abs(differences.mean(axis=-1))
    out = np.empty(len(differences))
    for start in range(0, len(differences), 512):
        chunk = differences[start : start + 512]
        flipped = np.abs(chunk @ signs.T / m)
        out[start : start + 512] = np.mean(
            flipped >= observed[start : start + 512, None] * (1 - 1e-12), axis=-1
        )
    return out


def rates(trials: int, effect: float, outlier: Outlier, sims: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng([seed, trials, int(effect * 1000), len(outlier)])
    batches = simulate_lab_batches(
        rng, experiments=sims, trials=trials, effect_rel=effect, outlier=outlier
    )
    means = batches.mean(axis=-2)
    a, b = means[..., 0], means[..., 1]
    return {
        "sign-flip": float(np.mean(sign_flip_p(b - a) < ALPHA)),
        "paired-t": float(
            np.mean(per_trial_decision("paired-t-none", a, b, ALPHA).p_value < ALPHA)
        ),
        "trimmed-t": float(
            np.mean(per_trial_decision("trimmed-t-none", a, b, ALPHA).p_value < ALPHA)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, help="simulations per cell (default 4000)")
    parser.add_argument("--quick", action="store_true", help="300 simulations (harness check)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench/out/stats_robust.json"))
    args = parser.parse_args()
    sims = args.sims or (300 if args.quick else 4000)
    started = time.monotonic()
    table: dict[str, dict[int, dict[str, float]]] = {}
    for name, effect, outlier in CASES:
        table[name] = {m: rates(m, effect, outlier, sims, args.seed) for m in TRIALS}
        print(f"{name} (sign-flip / paired-t / trimmed-t, share with p < {ALPHA})")
        for m, found in table[name].items():
            cells = " / ".join(f"{found[k]:6.1%}" for k in ("sign-flip", "paired-t", "trimmed-t"))
            print(f"  {m:2d} trials: {cells}")
    elapsed = time.monotonic() - started
    print(f"{sims} simulations per cell, {elapsed:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"alpha": ALPHA, "effect": EFFECT, "sims": sims, "seed": args.seed, "rates": table}
    args.out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
