#!/usr/bin/env python3
"""Runs the statistics benchmarks: bootstrap speed and detection power (bench/RESULTS.md).

    python bench/stats/run.py            # every *_bench.py here
    python bench/stats/run.py --quick    # arguments go to every benchmark

Each benchmark runs in its own process, so one that calls sys.exit does not end the others.
Exits 1 if any benchmark failed.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _runner import run_benchmarks  # noqa: E402


def main(argv: list[str]) -> int:
    scripts = {s.stem: s for s in sorted(HERE.glob("*_bench.py"))}
    return run_benchmarks(scripts, argv, title="bench/stats")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
