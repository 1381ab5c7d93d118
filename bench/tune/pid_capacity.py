#!/usr/bin/env python3
"""Capacity as a tuning objective, measured by the PID search, end to end on the real
sample service: `hairline tune` over the sample service's worker threads, each evaluation
a capacity-mode A/B (`[mode] search = "pid"`) of the default (one thread) against a
candidate, run by the lab like any experiment.

The known truth: every request's work is a sleep (``--work sleep``), so a worker thread
serves at most one request per sleep and the highest rate under the SLO grows with the
threads, about in proportion, while the CPU is not the limit. ``--regress-cpu 3`` makes each
sleep four times the default one: one thread's knee near 1,000 requests/s, three threads'
near 3,000/s, under the rate at which the load generator keeps its schedule on a 2-vCPU VM.
A run passes when every candidate's capacity effect is above the default, the candidates
rank by their threads, and the pick is the most threads.

    python bench/tune/pid_capacity.py                    # grid over 1-3 threads, ~3 minutes
    python bench/tune/pid_capacity.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sample-service"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]

EXPERIMENT = """\
service = "service.toml"
trace = "trace.jsonl"

[mode]
name = "capacity"
search = "pid"              # the PID drives each arm's rate to where its p99 meets the SLO
slo_p99_ms = 20
start_rate_per_s = 500

[arms.A]
args = ["--work", "sleep", "--regress-cpu", "3"]

[arms.B]

[load]
duration_s = 1
warmup_rate_per_s = 300
warmup_duration_s = 0.5

[design]
trials = {trials}
"""

TUNE = """\
experiment = "experiment.toml"

[objective]
metric = "max_throughput_per_s"

[search]
searcher = "grid"

[apply]
args = ["--threads", "{threads}"]

[params.threads]
type = "int"
values = [1, 2, 3]
default = 1
"""


def write_files(folder: Path, trials: int) -> Path:
    for name in ("service.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, folder / name)
    (folder / "experiment.toml").write_text(EXPERIMENT.format(trials=trials))
    tune = folder / "tune.toml"
    tune.write_text(TUNE)
    return tune


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def verdict(result: dict[str, Any]) -> tuple[bool, str]:
    """Whether the run found what the sleeps say: more threads, more capacity."""
    done = [e for e in result["evaluations"] if e["status"] == "done"]
    if len(done) != len(result["evaluations"]) or not done:
        return False, f"{len(done)} of {len(result['evaluations'])} evaluations done"
    by_threads = sorted(done, key=lambda e: e["config"]["threads"])
    effects = [e["effect_rel"] for e in by_threads]
    if any(effect <= 0 for effect in effects):
        return False, f"a candidate not above the default: {effects}"
    if effects != sorted(effects):
        return False, f"the candidates do not rank by their threads: {effects}"
    best = (result.get("best") or {}).get("config", {}).get("threads")
    if best != by_threads[-1]["config"]["threads"]:
        return False, f"the pick is {best} threads"
    return True, "more threads, more capacity; the pick is the most threads"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1, help="trials of each A/B (default 1)")
    parser.add_argument("--json", type=Path, help="write the tuning run's JSON and the verdict")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="hairline-pid-tune-"))
    tune = write_files(folder, args.trials)
    out = folder / "tune.json"
    command = [*HAIRLINE, "tune", str(tune), "--home", str(folder / "home"), "--json", str(out)]
    print("$ hairline tune", tune, flush=True)
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    took_s = time.monotonic() - started
    if not out.exists():
        print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
        return 1
    result = json.loads(out.read_text())
    print(f"\n{'threads':>7} {'status':8} {'default /s':>10} {'candidate /s':>12} "
          f"{'effect':>8} {'interval':>18}")  # fmt: skip
    for e in sorted(result["evaluations"], key=lambda e: e["config"]["threads"]):
        print(f"{e['config']['threads']:7d} {e['status']:8} {number(e['mean_control']):>10} "
              f"{number(e['mean_candidate']):>12} {percent(e['effect_rel']):>8} "
              f"[{percent(e['ci_rel'][0])}, {percent(e['ci_rel'][1])}]")  # fmt: skip
    ok, why = verdict(result)
    print(f"\n{'PASS' if ok else 'FAIL'}: {why} ({took_s:.0f} s, exit {done.returncode})")
    if args.json:
        args.json.write_text(
            json.dumps({"ok": ok, "why": why, "seconds": took_s, "run": result}, indent=2)
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
