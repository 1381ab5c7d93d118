#!/usr/bin/env python3
"""`hairline sensitivity` checked by injection: predicted power against measured detection.

    python bench/sensitivity/run.py                  # 20 A/B runs at each of 0.5%, 1%, 2%
    python bench/sensitivity/run.py --runs 5         # fewer
    python bench/sensitivity/run.py --quick          # 2 runs each, 3 trials

The sample service (examples/sample-service) at a fixed 2,000 requests/s with 1 s batches,
the paired t model (the one `hairline sensitivity` predicts for). First `hairline
sensitivity` measures the noise per trial with --aa-trials A/A trials; then A/B runs of
--trials trials with `--regress-cpu SIZE` on arm B, the sizes interleaved so that drift
falls on all alike. A run detects the change when cpu_ns_per_request's p is under alpha with
a positive effect. `--regress-cpu X` adds X to the request's CPU work, not to all of its CPU,
so the true effect is taken as the mean of the runs' measured effects (each unbiased), and
the predicted power is the noncentral t's at that effect, with the measured noise and
--trials trials. Writes bench/out/sensitivity.json; exits 1 when a size's measured rate is
more than 10 points from its prediction.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _sample_lab import HAIRLINE, ROOT, cpu_verdict, run_json, short_experiment

OUT = ROOT / "bench" / "out" / "sensitivity.json"
MODEL = "paired-t-none"  # the model `hairline sensitivity` predicts for


def one_run(path: Path, home: Path) -> dict[str, Any]:
    report, wall_s = run_json("run", path, home)
    cpu = cpu_verdict(report)
    return {"effect_rel": cpu["effect_rel"], "p_value": cpu["p_value"], "wall_s": wall_s}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--aa-trials", type=int, default=12)
    parser.add_argument("--sizes", default="0.005,0.01,0.02")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.trials, args.aa_trials = 2, 3, 4
    sizes = [float(s) for s in args.sizes.split(",")]
    from hairline.stats.planning import power_at

    folder = Path(tempfile.mkdtemp(prefix="hl-sens-"))
    try:
        home = folder / "home"
        aa = short_experiment(folder, trials=args.trials, model=MODEL)
        measured = folder / "sensitivity.json"
        started = time.monotonic()
        subprocess.run([*HAIRLINE, "sensitivity", str(aa), "--home", str(home), "--trials",
                        str(args.aa_trials), "--json", str(measured)],
                       check=True, capture_output=True)  # fmt: skip
        sens = json.loads(measured.read_text())
        sd = sens["metrics"][0]["sd_per_trial_rel"]
        print(f"noise per trial {sd:.3%} from {args.aa_trials} A/A trials "
              f"({time.monotonic() - started:.0f} s)", flush=True)  # fmt: skip
        files = {s: short_experiment(folder, trials=args.trials, regress=s, model=MODEL)
                 for s in sizes}  # fmt: skip
        runs: dict[float, list[dict[str, Any]]] = {size: [] for size in sizes}
        for i in range(args.runs):
            for size in sizes:
                run = one_run(files[size], home)
                runs[size].append(run)
                print(f"run {i + 1} size {size:.1%}: effect {run['effect_rel']:+.3%} "
                      f"p {run['p_value']:.3g} ({run['wall_s']:.0f} s)", flush=True)  # fmt: skip
        alpha = sens["alpha"]
        rows = []
        for size in sizes:
            found = [r["p_value"] < alpha and r["effect_rel"] > 0 for r in runs[size]]
            effect = statistics.mean(r["effect_rel"] for r in runs[size])
            predicted = power_at(sd, args.trials, effect, alpha=alpha)
            rows.append({"regress_cpu": size, "runs": len(found), "detected": sum(found),
                         "measured_rate": sum(found) / len(found), "mean_effect_rel": effect,
                         "predicted_power": predicted})  # fmt: skip
        print(f"\n| --regress-cpu | mean effect | runs | detected | measured | predicted "
              f"({args.trials} trials, noise {sd:.3%}) | difference |")  # fmt: skip
        print("|---|---|---|---|---|---|---|")
        failed = False
        for r in rows:
            diff = (r["measured_rate"] - r["predicted_power"]) * 100
            failed |= abs(diff) > 10
            print(f"| {r['regress_cpu']:.1%} | {r['mean_effect_rel']:+.3%} | {r['runs']} | "
                  f"{r['detected']} | {r['measured_rate']:.0%} | {r['predicted_power']:.0%} | "
                  f"{diff:+.0f} points |")  # fmt: skip
        OUT.parent.mkdir(parents=True, exist_ok=True)
        every = {str(k): v for k, v in runs.items()}
        payload = {"sensitivity": sens, "trials": args.trials, "rows": rows, "runs": every}
        OUT.write_text(json.dumps(payload, indent=2))
        print(f"wrote {OUT}")
        return 1 if failed else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
