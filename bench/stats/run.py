"""Run the statistics benchmarks: bootstrap speed and detection power (bench/RESULTS.md)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    for script in ("bootstrap_bench.py", "power_bench.py"):
        print(f"== bench/stats/{script}", flush=True)
        sys.argv = [str(HERE / script)]
        runpy.run_path(str(HERE / script), run_name="__main__")
