#!/usr/bin/env python3
"""Coverage of attribution's intervals when runs differ: the run-clustered bootstrap of
attribute/model.py against a per-request bootstrap, over seeded synthetic designs whose
runs each have their own offset and scale (the simulation of tests/attribute/test_model.py,
which checks seeds 0-199; this runs others).

    .venv/bin/python bench/attribute/coverage.py                  # seeds 200-1199
    .venv/bin/python bench/attribute/coverage.py --first 0 --seeds 200

Prints, per (quantile, term), how many intervals covered the true coefficient, of each
kind. Nominal: 95%.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# The simulation and the truth live with the test that checks them.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "attribute"))
from test_model import coverage_counts, mixture_truth


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=int, default=200, help="the first seed")
    parser.add_argument("--seeds", type=int, default=1000, help="how many designs")
    args = parser.parse_args()
    started = time.monotonic()
    truth = mixture_truth()
    clustered, naive = coverage_counts(range(args.first, args.first + args.seeds), truth)
    print(f"seeds {args.first}-{args.first + args.seeds - 1}: covered of {args.seeds}, 95% nominal")
    print(f"{'quantile':>8} {'term':<10} {'true':>8} {'runs':>12} {'requests':>12}")
    for (q, term), count in clustered.items():
        print(f"{q:>8g} {term:<10} {truth[q][term]:>8.1f} "
              f"{count:>5} {count / args.seeds:>6.1%} "
              f"{naive[q, term]:>5} {naive[q, term] / args.seeds:>6.1%}")  # fmt: skip
    print(f"{time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
