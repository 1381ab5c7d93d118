#!/usr/bin/env python3
"""Quantile regression of a million per-request rows at p99: hairline's fit_quantile against
statsmodels' QuantReg at its default settings, in the same run.

The data: an intercept and 7 regressors (3 two-level factors coded -1/2, +1/2 as
attribute/model.py codes them, two of their interactions, and two continuous ones), and a
latency whose noise is log-normal with a scale that grows with the first factor, so that
every quantile has its own slope. Each fitter runs in a Python process of its own, which
builds the same seeded data, fits it, and reports the fit's wall time, the process's peak
resident memory (``getrusage``), the resident memory just before the fit (the data's
share), and the check loss of its coefficients on all rows (stats/quantreg.py's
``check_loss`` for both).

    .venv/bin/python bench/attribute/run.py                  # 1,000,000 rows, q 0.99
    .venv/bin/python bench/attribute/run.py --quick          # 200,000 rows
    .venv/bin/python bench/attribute/run.py --statsmodels-max-iter 200 --json

Goal (issue #16): hairline at most 15 s, with a loss no worse than statsmodels' default.
Writes bench/out/attribute.json (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from hairline.stats.quantreg import check_loss, fit_quantile

OUT = Path(__file__).resolve().parents[1] / "out" / "attribute.json"
FITTERS = ("hairline", "statsmodels")


def data(rows: int, seed: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    rng = np.random.default_rng(seed)
    factors = rng.choice([-0.5, 0.5], size=(rows, 3))
    X = np.column_stack(
        [
            np.ones(rows),
            factors,
            factors[:, 0] * factors[:, 1],
            factors[:, 1] * factors[:, 2],
            rng.uniform(0.0, 1.0, rows),
            rng.standard_normal(rows),
        ]
    )
    mean_us = X @ np.array([800.0, 120.0, -40.0, 15.0, 30.0, 0.0, 60.0, 5.0])
    scale_us = 80.0 * (1.0 + 0.8 * factors[:, 0] + 0.5 * X[:, 6])
    return X, mean_us + scale_us * rng.lognormal(0.0, 0.6, rows)


def fit_one(fitter: str, rows: int, q: float, seed: int, max_iter: int | None) -> dict[str, Any]:
    """Runs in the child: builds the data, fits it, reports."""
    X, y = data(rows, seed)
    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    note = ""
    if fitter == "hairline":
        fit = fit_quantile(X, y, q)
        coef, note = fit.coef, f"{fit.iterations} interior-point iterations"
    else:
        from statsmodels.regression.quantile_regression import QuantReg

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            options = {} if max_iter is None else {"max_iter": max_iter}
            result = QuantReg(y, X).fit(q=q, **options)
        coef = np.asarray(result.params)
        note = f"{result.iterations} IRLS iterations"
        if any("Maximum number of iterations" in str(w.message) for w in caught):
            note += " (hit max_iter: not converged)"
    seconds = time.perf_counter() - started
    return {
        "fitter": fitter,
        "seconds": seconds,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "data_rss_mib": rss_before_kib / 1024,
        "loss": check_loss(X, y, coef, q),
        "coef": coef.tolist(),
        "note": note,
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="200,000 rows")
    parser.add_argument("--q", type=float, default=0.99)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--statsmodels-max-iter",
        type=int,
        default=None,
        help="cap statsmodels' IRLS iterations (default: its own, 1000)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    parser.add_argument("--child", choices=FITTERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rows = 200_000 if args.quick else args.rows
    if args.child:
        print(json.dumps(fit_one(args.child, rows, args.q, args.seed, args.statsmodels_max_iter)))
        return 0

    results = []
    for fitter in FITTERS:
        command = [sys.executable, __file__, "--child", fitter, "--rows", str(rows)]
        command += ["--q", str(args.q), "--seed", str(args.seed)]
        if args.statsmodels_max_iter is not None:
            command += ["--statsmodels-max-iter", str(args.statsmodels_max_iter)]
        child = subprocess.run(command, capture_output=True, text=True, check=True)
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    ours, theirs = results
    summary = {
        "rows": rows,
        "regressors": len(ours["coef"]),
        "q": args.q,
        "fitters": results,
        "speedup": theirs["seconds"] / ours["seconds"],
        "loss_ratio": ours["loss"] / theirs["loss"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{rows:,} rows x {summary['regressors']} regressors at q {args.q}")
    print(f"{'fitter':<12} {'seconds':>9} {'peak MiB':>9} {'data MiB':>9} {'check loss':>16}  note")
    for r in results:
        print(
            f"{r['fitter']:<12} {r['seconds']:>9.2f} {r['peak_rss_mib']:>9.0f} "
            f"{r['data_rss_mib']:>9.0f} {r['loss']:>16.6f}  {r['note']}"
        )
    print(
        f"statsmodels / hairline time: {summary['speedup']:.1f}x; "
        f"hairline / statsmodels loss - 1: {summary['loss_ratio'] - 1:+.2e}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
