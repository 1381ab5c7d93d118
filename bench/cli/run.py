#!/usr/bin/env python3
"""How long the ``hairline`` command takes to start: wall time of commands that do little
(``--help``, ``status`` on an empty lab, ``schema --check``), median of ``--runs`` each.

Every test that runs the CLI as a subprocess, and every process the lab starts
(``lab process``, ``route fleet``), pays this start-up before doing anything.

    python bench/cli/run.py                                   # this tree
    python bench/cli/run.py --tree main=/tmp/main --tree new=.  # trees side by side

With several ``--tree``s, each run goes through every command in every tree, the trees'
order alternating from one run to the next, so that load on the machine falls on all of
them alike. A tree is a checkout whose ``python/`` folder goes first on PYTHONPATH; all
use this interpreter and its installed packages. Prints a table and, with ``--json``,
writes the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# Each case: its name and the arguments after `python`. "{schema}" is the tree's
# docs/schema folder.
CASES: list[tuple[str, list[str]]] = [
    ("python -c pass", ["-c", "pass"]),
    ("import hairline.cli", ["-c", "import hairline.cli"]),
    ("hairline --version", ["-m", "hairline", "--version"]),
    ("hairline --help", ["-m", "hairline", "--help"]),
    ("hairline status", ["-m", "hairline", "status"]),
    ("hairline report --help", ["-m", "hairline", "report", "--help"]),
    ("hairline analyze --help", ["-m", "hairline", "analyze", "--help"]),
    ("hairline run --help", ["-m", "hairline", "run", "--help"]),
    ("hairline lab process --help", ["-m", "hairline", "lab", "process", "--help"]),
    ("hairline agent start --help", ["-m", "hairline", "agent", "start", "--help"]),
    ("hairline gate --help", ["-m", "hairline", "gate", "--help"]),
    ("hairline token list --help", ["-m", "hairline", "token", "list", "--help"]),
    ("hairline trace stats --help", ["-m", "hairline", "trace", "stats", "--help"]),
    ("hairline route fleet --help", ["-m", "hairline", "route", "fleet", "--help"]),
    ("hairline schema --check", ["-m", "hairline", "schema", "--check", "{schema}"]),
]


def _make_lab(tree: Path, home: Path) -> None:
    """An empty lab database in ``home`` (what ``hairline status`` reads), made by the
    tree's own code."""
    code = "import sys; from pathlib import Path; from hairline.store.db import open_store; "
    code += "open_store(home=Path(sys.argv[1]))"
    subprocess.run([sys.executable, "-c", code, str(home)], env=_env(tree), check=True)


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HAIRLINE_DB")}
    env["PYTHONPATH"] = str(tree / "python")
    return env


def _time_s(tree: Path, args: list[str], cwd: Path) -> float:
    argv = [sys.executable, *(a.replace("{schema}", str(tree / "docs/schema")) for a in args)]
    start = time.perf_counter()
    done = subprocess.run(argv, env=_env(tree), cwd=cwd, capture_output=True, text=True)
    elapsed_s = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {tree} failed:\n{done.stderr}")
    return elapsed_s


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, help="write the medians (seconds) here")
    parser.add_argument("--quick", action="store_true", help="3 runs")
    args = parser.parse_args(argv)
    trees = {"tree": REPO} if not args.tree else {}
    for item in args.tree:
        name, _, path = item.partition("=")
        trees[name] = Path(path).resolve()
    runs = 3 if args.quick else args.runs
    times_s: dict[str, dict[str, list[float]]] = {t: {c: [] for c, _ in CASES} for t in trees}
    with tempfile.TemporaryDirectory() as tmp:
        labs = {name: Path(tmp) / name for name in trees}
        for name, tree in trees.items():
            labs[name].mkdir()
            _make_lab(tree, labs[name] / ".hairline")
        order = list(trees)
        for run in range(runs):
            for case, case_args in CASES:
                for name in order if run % 2 == 0 else reversed(order):
                    times_s[name][case].append(_time_s(trees[name], case_args, labs[name]))
    medians = {
        t: {c: statistics.median(v) for c, v in cases.items()} for t, cases in times_s.items()
    }
    names = list(trees)
    header = f"{'command':<30}" + "".join(f"{n:>12}" for n in names)
    if len(names) == 2:
        header += f"{'ratio':>8}"
    print(f"median of {runs} runs, seconds, {sys.executable}")
    print(header)
    for case, _ in CASES:
        line = f"{case:<30}" + "".join(f"{medians[n][case]:>12.3f}" for n in names)
        if len(names) == 2:
            line += f"{medians[names[1]][case] / medians[names[0]][case]:>8.2f}"
        print(line)
    if args.json is not None:
        payload = {
            "runs": runs,
            "trees": {n: str(p) for n, p in trees.items()},
            "median_s": medians,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
