#!/usr/bin/env python3
"""Runs every benchmark: each bench/<name>/run.py, one after another, with this Python.

    python bench/run.py              # all of them
    python bench/run.py engine       # only the named ones

Arguments after `--` are passed to every benchmark. Exits non-zero if any benchmark failed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    names, passed = argv, []
    if "--" in argv:
        split = argv.index("--")
        names, passed = argv[:split], argv[split + 1 :]
    scripts = sorted(BENCH_DIR.glob("*/run.py"))
    if names:
        unknown = set(names) - {s.parent.name for s in scripts}
        if unknown:
            known = ", ".join(s.parent.name for s in scripts)
            print(f"no benchmark named {', '.join(sorted(unknown))} (have: {known})")
            return 2
        scripts = [s for s in scripts if s.parent.name in names]
    failed = []
    for script in scripts:
        print(f"== bench/{script.parent.name}", flush=True)
        if subprocess.run([sys.executable, str(script), *passed]).returncode != 0:
            failed.append(script.parent.name)
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
