#!/usr/bin/env python3
"""Trials to a verdict on the whole trace and on the one the DiffSuggester narrows it to.

    python bench/suggest/run.py              # 4 runs of each, alternating
    python bench/suggest/run.py --runs 2     # fewer
    python bench/suggest/run.py --quick      # 1 of each

examples/suggest's repository (make_repo.py: HEAD makes invoice_tax, which only /invoice
runs, do twice its work) with its experiment as it is but for `trials = "auto"` (up to
--max-trials, deciding on cpu_ns_per_request): once on the whole trace (10% /invoice), once
with `--suggested-by HEAD` (/invoice only). Full and reduced alternate so whatever else the
machine does falls on both alike; each run has a home of its own (no A/A history, so the
fallback model). Prints a row per run and, per trace, the median trials (a run that never
settled counts with the trials it ran), how many runs settled and how many found the
regression, and the ratio of the medians; writes the rows
to bench/out/suggest.json. Exits 1 when the reduced trace missed the regression in any run.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "suggest"
OUT = ROOT / "bench" / "out" / "suggest.json"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
SETTLED = ("regression", "no change", "improvement")


def auto_experiment(repo: Path, max_trials: int) -> Path:
    """The example's experiment file with trials = "auto"."""
    text = (repo / "experiment.toml").read_text()
    auto = f'trials = "auto"\nmax_trials = {max_trials}\ndecide_on = ["cpu_ns_per_request"]'
    if "trials = 3" not in text:
        raise SystemExit("examples/suggest/experiment.toml no longer says trials = 3")
    path = repo / "bench-auto.toml"  # untracked: the arms are HEAD^ and HEAD, not the tree
    path.write_text(text.replace("trials = 3", auto))
    return path


def one_run(trace: str, experiment: Path, home: Path) -> dict[str, Any]:
    report = home / "report.json"
    extra = ["--suggested-by", "HEAD"] if trace == "reduced" else []
    started = time.monotonic()
    done = subprocess.run(
        [*HAIRLINE, "run", str(experiment), *extra, "--home", str(home), "--json", str(report)],
        capture_output=True, text=True, cwd=experiment.parent,
    )  # fmt: skip
    wall_s = time.monotonic() - started
    if not report.exists():
        return {"trace": trace, "error": (done.stderr or done.stdout)[-2000:], "wall_s": wall_s}
    data = json.loads(report.read_text())
    cpu = next(m for m in data["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    return {
        "trace": trace,
        "verdict": cpu["verdict"],
        "effect_rel": cpu["effect_rel"],
        "ci_rel": cpu["ci_rel"],
        "trials": data["trials_done"],
        "wall_s": wall_s,
    }


def summary(rows: list[dict[str, Any]], trace: str, max_trials: int) -> tuple[str, float]:
    """A line for ``trace``'s runs, and its median trials: a run that never settled counts
    with the trials it ran (``max_trials``), so the median is a lower bound then."""
    mine = [r for r in rows if r["trace"] == trace and "error" not in r]
    settled = sum(r["verdict"] in SETTLED for r in mine)
    found = sum(r["verdict"] == "regression" for r in mine)
    median = statistics.median(r["trials"] for r in mine) if mine else math.nan
    if settled == 0:
        reached = f"no verdict within {max_trials} trials in any of {len(mine)} runs"
    else:
        reached = f"median {median:g} trials ({settled} of {len(mine)} settled"
        reached += ")" if settled == len(mine) else f", the others stopped at {max_trials})"
    return f"{trace:8} {reached}; regression found in {found} of {len(mine)}", median


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=4, help="runs of each trace")
    parser.add_argument("--max-trials", type=int, default=15, help="trials = auto's limit")
    parser.add_argument("--quick", action="store_true", help="one run of each")
    args = parser.parse_args(argv)
    runs = 1 if args.quick else args.runs
    rows = []
    with tempfile.TemporaryDirectory(prefix="hairline-bench-suggest-") as tmp:
        repo = Path(tmp) / "shop"
        subprocess.run([sys.executable, str(EXAMPLE / "make_repo.py"), str(repo)], check=True,
                       capture_output=True)  # fmt: skip
        experiment = auto_experiment(repo, args.max_trials)
        print(f"{'run':>3} {'trace':8} {'verdict':13} {'effect':>8} {'trials':>6} {'wall':>6}")
        for i in range(runs):
            for trace in ("full", "reduced"):
                row = one_run(trace, experiment, Path(tmp) / f"home-{trace}-{i}")
                rows.append(row)
                if "error" in row:
                    print(f"{i:>3} {trace:8} error: {row['error'][-300:]}", flush=True)
                    continue
                print(f"{i:>3} {trace:8} {row['verdict']:13} {row['effect_rel'] * 100:+7.2f}% "
                      f"{row['trials']:>6} {row['wall_s']:5.0f}s", flush=True)  # fmt: skip
    full_text, full = summary(rows, "full", args.max_trials)
    reduced_text, reduced = summary(rows, "reduced", args.max_trials)
    print(full_text)
    print(reduced_text)
    print(f"ratio of median trials, full / reduced: {full / reduced:.2f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"max_trials": args.max_trials, "runs": rows}, indent=2) + "\n")
    missed = [r for r in rows if r["trace"] == "reduced" and r.get("verdict") != "regression"]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
