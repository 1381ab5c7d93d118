#!/usr/bin/env python3
"""Perflab Table 3 by simulation, and the host-clustered bootstrap without its corrections.

Prints the table docs/stats.md quotes ("Perflab Table 3, reproduced") and the range it
gives for the host-clustered rows without hairline's two few-cluster corrections. Each
cell is 1,000 simulated A/A tests of endpoint 1 of Table 1 (16 hosts, 256 requests per
arm, one repetition: the experiment of Perflab figure 5), a 95% interval each; the Type I
error is the share of intervals that exclude 0. Seeded as tests/stats/test_bootstrap.py
seeds its checks of the same cells (data 100 + the design's index, weights 7), so both
see the same draws.

"Without the corrections" is the paper's CLT interval on the same replicates: their own
spread, not rescaled to s^2/C (for Poisson weights, the default, the rescaling factor is
1, so nothing changes there), and the normal quantile 1.96 instead of Student's t with
C - 1 degrees of freedom (C clusters: 16 hosts, or 8 host pairs for host-block).

    python bench/stats/table3_bench.py            # about a minute on 2 CPUs
    python bench/stats/table3_bench.py --quick    # 200 tests per cell (rates to +/-3 points)

Writes bench/out/stats_table3.json (or --out FILE).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

from hairline.stats.bootstrap import Cluster, bootstrap_replicates, cluster_totals  # noqa: E402
from hairline.stats.data import MetricSample  # noqa: E402
from hairline.stats.designs import (  # noqa: E402
    Design,
    VarianceComponents,
    schedule,
    standard_error,
)
from hairline.stats.simulate import simulate_values  # noqa: E402

OUT_FILE = REPO / "bench" / "out" / "stats_table3.json"
HOSTS, REQUESTS = 16, 256
DESIGNS: tuple[Design, ...] = ("unbalanced", "request-balanced", "host-balanced", "fully-balanced")
# The paper's Table 3 Type I errors (%), by design and bootstrap.
PAPER: dict[tuple[Design, Cluster], float] = {
    ("unbalanced", "request"): 21.4,
    ("unbalanced", "iid"): 17.8,
    ("unbalanced", "host"): 3.6,
    ("request-balanced", "request"): 71.6,
    ("request-balanced", "iid"): 10.8,
    ("request-balanced", "host"): 0.8,
    ("request-balanced", "host-block"): 5.7,
    ("host-balanced", "request"): 8.4,
    ("host-balanced", "iid"): 6.8,
    ("host-balanced", "host"): 5.0,
    ("fully-balanced", "request"): 46.8,
    ("fully-balanced", "iid"): 0.0,
    ("fully-balanced", "host"): 4.8,
}
# The bootstrap the lab uses for each design (docs/stats.md): the rows of the range.
HOST_CLUSTERED: tuple[tuple[Design, Cluster], ...] = (
    ("unbalanced", "host"),
    ("request-balanced", "host-block"),
    ("host-balanced", "host"),
    ("fully-balanced", "host"),
)
# Replicates per test: as many as the tests of the same cells use (iid has one cluster per
# row and costs rows x replicates weight draws).
REPLICATES: dict[Cluster, int] = {"host": 500, "host-block": 500, "request": 200, "iid": 100}


def cell(
    design: Design, cluster: Cluster, values: np.ndarray, n_replicates: int
) -> dict[str, float]:
    """One cell: Type I error with and without the corrections, and the mean bootstrap SE."""
    plan = schedule(design, hosts=HOSTS, requests=REQUESTS)
    sample = MetricSample(
        value=np.zeros(len(plan)), arm=plan.arm, batch=plan.batch, host=plan.host,
        request=plan.request,
    )  # fmt: skip
    totals = cluster_totals(sample, cluster=cluster, values=values)
    replicates = bootstrap_replicates(
        totals, n_replicates=n_replicates, rng=np.random.default_rng(7)
    )
    mean_a, mean_b = totals.means()
    se = np.nanstd(replicates.effect_abs, axis=-1, ddof=1)
    effect = np.abs(mean_b - mean_a)
    return {
        "type1": float(np.mean(effect > stats.t.ppf(0.975, replicates.df) * se)),
        "type1_uncorrected": float(np.mean(effect > stats.norm.ppf(0.975) * se)),
        "mean_se": float(np.mean(se)),
        "clusters": int(replicates.df + 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 A/A tests per cell")
    parser.add_argument("--out", type=Path, default=OUT_FILE, help="where the JSON goes")
    args = parser.parse_args()
    n_tests = 200 if args.quick else 1000
    components = VarianceComponents.table1(1)
    started = time.perf_counter()
    cells: dict[tuple[Design, Cluster], dict[str, float]] = {}
    for index, design in enumerate(DESIGNS):
        plan = schedule(design, hosts=HOSTS, requests=REQUESTS)
        values = simulate_values(
            plan, components, n_experiments=n_tests, rng=np.random.default_rng(100 + index)
        )
        analytic = standard_error(design, components, hosts=HOSTS, requests=REQUESTS)
        for d, cluster in PAPER:
            if d == design:
                found = cell(design, cluster, values, REPLICATES[cluster])
                cells[design, cluster] = {**found, "analytic_se": analytic}
    low, high = (x / n_tests for x in stats.binom.interval(0.99, n_tests, 0.05))

    print(f"Perflab Table 3: {n_tests:,} simulated A/A tests per cell, endpoint 1 of Table 1,")
    print(f"{HOSTS} hosts, {REQUESTS} requests per arm, one repetition, 95% intervals.")
    print(f"A true 5% lies in {low:.1%} to {high:.1%} (binomial, 99%).\n")
    print(
        "| design | bootstrap | Type I error | mean bootstrap SE | analytic SE | paper's Type I |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for (design, cluster), c in cells.items():
        print(
            f"| {design} | {cluster} | {c['type1']:.1%} | {c['mean_se']:.3f} | "
            f"{c['analytic_se']:.3f} | {PAPER[design, cluster]:.1f}% |"
        )
    corrected = [cells[key]["type1"] for key in HOST_CLUSTERED]
    uncorrected = [cells[key]["type1_uncorrected"] for key in HOST_CLUSTERED]
    print("\nThe host-clustered rows (host; host-block for request-balanced):")
    for key, c in ((k, cells[k]) for k in HOST_CLUSTERED):
        print(
            f"  {key[0]} / {key[1]} ({c['clusters']} clusters): {c['type1']:.1%} with the "
            f"corrections, {c['type1_uncorrected']:.1%} without"
        )
    print(
        f"Type I error {min(uncorrected):.1%} to {max(uncorrected):.1%} without the "
        f"corrections and {min(corrected):.1%} to {max(corrected):.1%} with them."
    )
    print(f"({time.perf_counter() - started:.0f} s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "tests_per_cell": n_tests,
                "band": [low, high],
                "cells": [{"design": d, "bootstrap": c, **v} for (d, c), v in cells.items()],
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
