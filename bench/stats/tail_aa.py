#!/usr/bin/env python3
"""How often an A/A run of the sample service flags each metric, latency tails above all
(issue #31 item 13).

    python bench/stats/tail_aa.py                # 40 A/A runs, each in a fresh --home
    python bench/stats/tail_aa.py --runs 10      # fewer
    python bench/stats/tail_aa.py --quick        # 2 runs
    python bench/stats/tail_aa.py --shared-home  # one home for all runs: models from history
    python bench/stats/tail_aa.py --resample bench/out/tail_aa.json   # no runs: see below

The sample service (examples/sample-service) at a fixed 2,000 requests/s, 1 s batches,
--trials trials, the file's own analysis (adaptive, alpha 0.05), as bench/neighbour does but
without a neighbour. Each run gets a FRESH ``--home``: the adaptive model choice reads the
home's A/A history, so a shared home would change the model from run to run and the count
would mix models; in a fresh home every metric gets the documented fallback (the per-trial
model for the trial count), which is what a first experiment and a bisection step in a new
home see. Per metric it counts the runs whose verdict is a finding (anything but "no change"
or "inconclusive") and the runs with p < alpha, against the 95% binomial band of alpha, and
keeps each run's per-trial values (bench/out/tail_aa.json) for a look at why.
Not a *_bench.py: bench/stats/run.py does not run it (about 20 s a run).
Exits 1 when any metric's p < alpha count is above the band.

``--resample FILE`` runs nothing: it draws simulated A/A experiments of 4, 5, 8 and 16 trials
from the measured trials in FILE (one trial's A and B values together, the arms swapped at
random, as identical arms may be; seeded) and prints how often the two per-trial fallback
models find a change in a latency metric, as a step run with more trials (a bisection
repeat) would see.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _sample_lab import ROOT, run_json, short_experiment

OUT = ROOT / "bench" / "out" / "tail_aa.json"  # tail_aa-shared.json with --shared-home


def one_run(path: Path, home: Path) -> dict[str, Any]:
    """One A/A run in ``home``: per metric its verdict, p, effect, model and per-trial values."""
    report, wall_s = run_json("aa", path, home)
    analysis = report.get("analysis")
    if analysis is None:
        return {"failure": report.get("failure"), "wall_s": wall_s, "metrics": {}}
    per_trial = report.get("per_trial") or {}
    metrics = {}
    for m in analysis["metrics"]:
        arms = (per_trial.get(m["metric"]) or {}).get("arms", {})
        metrics[m["metric"]] = {
            "verdict": m["verdict"], "p": m["p_value"], "effect_rel": m["effect_rel"],
            "ci_rel": m["ci_rel"], "model": m["model"],
            "trials": {arm: [row["value"] for row in rows] for arm, rows in arms.items()},
        }  # fmt: skip
    return {"failure": None, "wall_s": wall_s, "metrics": metrics}


def resample(path: Path, *, sims: int = 20_000, alpha: float = 0.05) -> None:
    """The fallback models' A/A rates on experiments drawn from measured trials (module text)."""
    import numpy as np

    from hairline.stats.trialcore import SIMULATED_MODELS, per_trial_decision
    from hairline.stats.verdict import IMPROVEMENT, REGRESSION, classify

    runs = [r for r in json.loads(path.read_text())["runs"] if r["failure"] is None]
    rng = np.random.default_rng(20261129)
    theta = 0.1  # the latency metrics' threshold in examples/sample-service
    for name in ("latency_p50_us", "latency_p99_us", "latency_us"):
        a_all = np.concatenate([r["metrics"][name]["trials"]["A"] for r in runs])
        b_all = np.concatenate([r["metrics"][name]["trials"]["B"] for r in runs])
        log_ratio = np.log(b_all / a_all)
        print(f"{name}: {len(a_all)} trials, log-ratio sd {log_ratio.std():.3f}")
        for trials in (4, 5, 8, 16):
            pick = rng.integers(0, len(a_all), (sims, trials))
            swap = rng.random((sims, trials)) < 0.5
            a = np.where(swap, b_all[pick], a_all[pick])
            b = np.where(swap, a_all[pick], b_all[pick])
            for model in SIMULATED_MODELS:
                d = per_trial_decision(model, a, b, alpha)
                code = classify(d.effect_rel, *d.ci_rel, d.p_value, alpha=alpha, theta=theta)
                print(f"  {trials:2} trials {model:15} p < alpha {np.mean(d.p_value < alpha):.2%}"
                      f"  regression {np.mean(code == REGRESSION):.2%}"
                      f"  improvement {np.mean(code == IMPROVEMENT):.2%}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--resample", type=Path, help="a saved run's JSON (module text)")
    parser.add_argument("--shared-home", action="store_true",
                        help="one --home for every run, so the adaptive model selection "
                        "reads the runs before it (as in a home with A/A history)")  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.runs = 2
    if args.resample is not None:
        resample(args.resample)
        return 0
    out = OUT.with_name("tail_aa-shared.json") if args.shared_home else OUT
    from hairline.stats.certificate import binomial_band, is_false_positive

    folder = Path(tempfile.mkdtemp(prefix="hl-tailaa-"))
    runs: list[dict[str, Any]] = []
    started = time.monotonic()
    try:
        path = short_experiment(folder, trials=args.trials)
        for i in range(args.runs):
            home = folder / ("home" if args.shared_home else f"home-{i}")
            run = one_run(path, home)
            if not args.shared_home:
                shutil.rmtree(home, ignore_errors=True)
            runs.append(run)
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"runs": runs, "partial": True}, indent=1))
            flagged = [f"{k} {v['verdict']} {v['effect_rel']:+.1%}"
                       for k, v in run["metrics"].items()
                       if v["effect_rel"] is not None and (v["p"] < 0.05)]  # fmt: skip
            print(f"A/A {i + 1}: {run['failure'] or 'ok'} ({run['wall_s']:.0f} s) "
                  f"p<0.05: {', '.join(flagged) or '-'}", flush=True)  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    alpha = 0.05  # examples/sample-service/experiment.toml's
    done = [r for r in runs if r["failure"] is None]
    low, high = binomial_band(len(done), alpha)
    summary = {}
    print(f"\n{len(done)} of {len(runs)} A/A runs done; alpha {alpha} explains {low}-{high} "
          f"of {len(done)}; {time.monotonic() - started:.0f} s")  # fmt: skip
    print(f"{'metric':58} {'finding':>7} {'p<alpha':>7}  models")
    for name in done[0]["metrics"] if done else []:
        rows = [r["metrics"][name] for r in done if name in r["metrics"]]
        findings = sum(is_false_positive(m["verdict"]) for m in rows)
        significant = sum(m["p"] is not None and m["p"] < alpha for m in rows)
        models = dict(Counter(m["model"] for m in rows))
        summary[name] = {"runs": len(rows), "findings": findings, "p_below_alpha": significant,
                         "models": models}  # fmt: skip
        print(f"{name:58} {findings:7} {significant:7}  {models}")
    # Every metric is tested at alpha with no correction (the file's analysis), so a run flags
    # *some* metric far more often than alpha: say how often, for latency and for any metric.
    latency = [n for n in summary if n.startswith("latency")]
    any_latency = sum(any(is_false_positive(r["metrics"][n]["verdict"]) for n in latency
                          if n in r["metrics"]) for r in done)  # fmt: skip
    any_metric = sum(any(is_false_positive(m["verdict"]) for m in r["metrics"].values())
                     for r in done)  # fmt: skip
    print(f"runs with a finding on any latency metric ({len(latency)}): {any_latency} of "
          f"{len(done)}; on any metric ({len(summary)}): {any_metric}")  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"runs": runs, "failed": len(runs) - len(done), "band": [low, high],
               "alpha": alpha, "trials": args.trials, "summary": summary,
               "runs_with_latency_finding": any_latency,
               "runs_with_any_finding": any_metric, "shared_home": args.shared_home}  # fmt: skip
    out.write_text(json.dumps(payload, indent=1))
    print(f"wrote {out}")
    return 0 if all(s["p_below_alpha"] <= high for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
