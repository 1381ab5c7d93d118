#!/usr/bin/env python3
"""Runs every benchmark: each bench/<name>/run.py, one after another, with this Python.

    python bench/run.py                    # all of them
    python bench/run.py engine             # only the named ones
    python bench/run.py stats -- --quick   # arguments after `--` go to every benchmark

Each benchmark runs in its own process. Exits 1 if any benchmark failed, 2 for an unknown
name.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _runner import run_benchmarks  # noqa: E402


def main(argv: list[str]) -> int:
    names, passed = argv, []
    if "--" in argv:
        split = argv.index("--")
        names, passed = argv[:split], argv[split + 1 :]
    scripts = {s.parent.name: s for s in sorted(BENCH_DIR.glob("*/run.py"))}
    unknown = sorted(set(names) - set(scripts))
    if unknown:
        print(f"no benchmark named {', '.join(unknown)} (have: {', '.join(scripts)})")
        return 2
    chosen = {name: s for name, s in scripts.items() if not names or name in names}
    return run_benchmarks(chosen, passed, title="bench")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
