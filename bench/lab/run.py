#!/usr/bin/env python3
"""The lab end to end on a real service: examples/nginx-config, A/B and A/A, several times.

    python bench/lab/run.py                 # 5 A/B and 5 A/A runs, alternating
    python bench/lab/run.py --runs 2        # fewer
    python bench/lab/run.py --quick         # 1 of each
    python bench/lab/run.py --experiment examples/nginx-config/experiment-quarter.toml

Each run is `hairline run` (or `hairline aa`) of examples/nginx-config/experiment.toml as it
is: the rate calibrated to the file's target utilisation, trials = "auto". A/B and A/A
alternate so that whatever else the machine does falls on both alike. Prints one row per
run (verdict on cpu_ns_per_request, effect, interval, trials used, calibrated rate, wall
time) and writes them to bench/out/lab_<folder>_<file>.json (for the default,
lab_nginx_config_experiment.json). Exits 1 when fewer A/B runs than 4 in 5 caught the
change, or any A/A run was flagged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "nginx-config" / "experiment.toml"
OUT = ROOT / "bench" / "out"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]


def one_run(kind: str, home: Path, experiment: Path) -> dict[str, Any]:
    report = home / f"{kind}.json"
    started = time.monotonic()
    done = subprocess.run(
        [*HAIRLINE, "run" if kind == "ab" else "aa", str(experiment), "--home", str(home),
         "--json", str(report)],
        capture_output=True, text=True, env={**os.environ},
    )  # fmt: skip
    wall_s = time.monotonic() - started
    if not report.exists():
        return {"kind": kind, "error": (done.stderr or done.stdout)[-2000:], "wall_s": wall_s}
    data = json.loads(report.read_text())
    analysis = data.get("analysis") or {"metrics": []}
    cpu = next((m for m in analysis["metrics"] if m["metric"] == "cpu_ns_per_request"), None)
    return {
        "kind": kind,
        "phase": data["phase"],
        "verdict": cpu["verdict"] if cpu else None,
        "effect_rel": cpu["effect_rel"] if cpu else None,
        "ci_rel": cpu["ci_rel"] if cpu else None,
        "model": cpu["model"] if cpu else None,
        "trials": data["trials_done"],
        "rate_per_s": data["rate_per_s"],
        "wall_s": wall_s,
        "notes": data.get("notes", []),
    }


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="A/B and A/A runs each")
    parser.add_argument("--quick", action="store_true", help="one run of each")
    parser.add_argument("--experiment", type=Path, default=EXAMPLE,
                        help="the experiment file (default: the example's)")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.experiment.is_file():
        print(f"--experiment {args.experiment}: no such file")
        return 2
    out = OUT / f"lab_{args.experiment.parent.name}_{args.experiment.stem}.json".replace("-", "_")
    runs = 1 if args.quick else args.runs
    if shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        print("nginx is not installed (make sysdeps installs it)")
        return 1
    rows = []
    with tempfile.TemporaryDirectory(prefix="hairline-bench-lab-") as tmp:
        for i in range(runs):
            for kind in ("ab", "aa"):
                # A home per run: no A/A history, so every run uses the fallback model,
                # as a first experiment of a service would.
                row = one_run(kind, Path(tmp) / f"{kind}{i}", args.experiment.resolve())
                rows.append(row)
                lo, hi = row.get("ci_rel") or (None, None)
                print(
                    f"{kind} {i + 1}: {row.get('verdict') or row.get('error', '')[:200]}  "
                    f"effect {pct(row.get('effect_rel'))} [{pct(lo)}, {pct(hi)}]  "
                    f"trials {row.get('trials')}  rate {row.get('rate_per_s')}/s  "
                    f"wall {row['wall_s']:.0f} s",
                    flush=True,
                )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    caught = sum(1 for r in rows if r["kind"] == "ab" and r.get("verdict") == "regression")
    flagged = sum(1 for r in rows if r["kind"] == "aa" and r.get("verdict") == "regression")
    print(f"A/B caught {caught} of {runs}; A/A flagged {flagged} of {runs}; wrote {out}")
    return 0 if caught * 5 >= 4 * runs and flagged == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
