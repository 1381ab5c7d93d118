#!/usr/bin/env python3
"""A/A runs with a neighbour burning half a CPU: the verdict must not lie (#30 item 7).

    python bench/neighbour/run.py                # 20 A/A runs under the neighbour
    python bench/neighbour/run.py --runs 5       # fewer
    python bench/neighbour/run.py --quick        # 2 runs

The sample service (examples/sample-service) at a fixed 2,000 requests/s, 1 s batches,
--trials trials, the file's own analysis (adaptive: with no A/A history, the per-trial
fallback model). During every run a neighbour process, not pinned, burns half a CPU: 5 ms
of arithmetic, then 5 ms asleep, over and over, so the scheduler puts it on either CPU. An
A/A run is flagged when its cpu_ns_per_request verdict is anything but "no change" or
"inconclusive"; the count over the runs must lie within the 95% binomial band of alpha. The
interval may widen (its half-widths are printed); the false-positive rate may not rise.
Writes bench/out/neighbour.json; exits 1 when the count is above the band.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _sample_lab import ROOT, cpu_verdict, run_json, short_experiment

OUT = ROOT / "bench" / "out" / "neighbour.json"
BURN_S, SLEEP_S = 0.005, 0.005


def neighbour(stop: Any) -> None:
    """Half a CPU: busy for BURN_S, asleep for SLEEP_S, until told to stop."""
    x = 0
    while not stop.is_set():
        end = time.perf_counter() + BURN_S
        while time.perf_counter() < end:
            x = (x * 1103515245 + 12345) % 2147483648
        time.sleep(SLEEP_S)


def one_run(path: Path, home: Path) -> dict[str, Any]:
    report, wall_s = run_json("aa", path, home)
    if report.get("analysis") is None:  # failed: say why, and go on
        return {"verdict": "failed", "failure": report.get("failure"), "effect_rel": None,
                "ci_rel": None, "model": None, "wall_s": wall_s,
                "notes": report.get("notes", [])}  # fmt: skip
    cpu = cpu_verdict(report)
    return {"verdict": cpu["verdict"], "effect_rel": cpu["effect_rel"], "ci_rel": cpu["ci_rel"],
            "model": cpu["model"], "wall_s": wall_s, "notes": report.get("notes", [])}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs = 2
    from hairline.stats.certificate import binomial_band, is_false_positive

    folder = Path(tempfile.mkdtemp(prefix="hl-neighbour-"))
    stop = multiprocessing.Event()
    burner = multiprocessing.Process(target=neighbour, args=(stop,), daemon=True)
    try:
        path = short_experiment(folder, trials=args.trials)
        home = folder / "home"
        burner.start()
        runs = []
        for i in range(args.runs):
            run = one_run(path, home)
            runs.append(run)
            if run["ci_rel"] is None:
                print(f"A/A {i + 1}: failed: {run['failure']}", flush=True)
                continue
            lo, hi = run["ci_rel"]
            print(f"A/A {i + 1}: {run['verdict']} {run['effect_rel']:+.3%} [{lo:+.3%}, "
                  f"{hi:+.3%}] {run['model']} ({run['wall_s']:.0f} s)", flush=True)  # fmt: skip
    finally:
        stop.set()
        burner.join(timeout=5)
        if burner.is_alive():
            burner.kill()
        shutil.rmtree(folder, ignore_errors=True)
    alpha = 0.05  # examples/sample-service/experiment.toml's
    done = [r for r in runs if r["ci_rel"] is not None]
    flagged = sum(is_false_positive(r["verdict"]) for r in done)
    low, high = binomial_band(len(done), alpha)
    half = statistics.median((r["ci_rel"][1] - r["ci_rel"][0]) / 2 for r in done)
    print(f"\nflagged {flagged} of {len(done)} A/A runs under a half-CPU neighbour "
          f"({len(runs) - len(done)} failed); alpha {alpha} explains {low}-{high}; median "
          f"half-width {half:.2%}")  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    payload = {"runs": runs, "failed": len(runs) - len(done), "flagged": flagged,
               "band": [low, high], "alpha": alpha, "median_half_width_rel": half,
               "trials": args.trials}  # fmt: skip
    OUT.write_text(json.dumps(payload, indent=2))
    print(f"wrote {OUT}")
    return 0 if flagged <= high else 1


if __name__ == "__main__":
    sys.exit(main())
