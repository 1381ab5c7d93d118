#!/usr/bin/env python3
"""hairline tune on the real sample service: the exhaustive sweep of
examples/sample-service/tune.toml's space (grid, 23 A/B experiments) against Bayesian
optimisation (and hill climbing) with a budget of 10, in one lab (its own SQLite home).

    python bench/tune/service.py                 # grid, bo, hill; prints the table
    python bench/tune/service.py --json out.json

Each searcher's pick is judged by the sweep's own measurement of that configuration, so
the comparison does not rest on the searcher's noisy view of it: "gap" is how much more
CPU per request the pick costs than the sweep's best (the issue's goal: within 2%, in
fewer evaluations than the sweep).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TUNE = ROOT / "examples" / "sample-service" / "tune.toml"
HAIRLINE = Path(sys.executable).with_name("hairline")


def tune(home: Path, searcher: str, evaluations: int | None) -> dict[str, Any]:
    out = home / f"{searcher}.json"
    command = [str(HAIRLINE), "tune", str(TUNE), "--home", str(home), "--searcher", searcher,
               "--json", str(out)]  # fmt: skip
    if evaluations is not None:
        command += ["--evaluations", str(evaluations)]
    print("$", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def key(config: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(config.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--budget", type=int, default=10)
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="hairline-tune-bench-"))
    sweep = tune(home, "grid", None)
    measured = {key(sweep["default"]): 0.0}
    for e in sweep["evaluations"]:
        if e["status"] == "done":
            measured[key(e["config"])] = e["effect_rel"]
    best_key = min(measured, key=lambda k: measured[k])
    rows = [("grid", len(sweep["evaluations"]), best_key, measured[best_key], 0.0)]
    for searcher in ("bo", "hill"):
        result = tune(home, searcher, args.budget)
        pick = result["best"]["config"] if result["best"] else result["default"]
        effect = measured.get(key(pick), float("nan"))
        gap = (1 + effect) / (1 + measured[best_key]) - 1
        rows.append((searcher, len(result["evaluations"]), key(pick), effect, gap))
    print(f"\n{'searcher':8} {'evals':>5}  {'pick':34} {'sweep effect':>12} {'gap':>7}")
    for name, evals, pick, effect, gap in rows:
        print(f"{name:8} {evals:5d}  {pick:34} {effect:+12.2%} {gap:+7.2%}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "sweep": measured}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
