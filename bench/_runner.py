"""Runs benchmark scripts one after another, each in a Python process of its own.

A script in its own process cannot end the run for the others: a ``sys.exit(0)`` at the
end of one benchmark, an exception, or a crash ends that process only, and its exit status
decides whether it failed. ``bench/run.py`` and ``bench/stats/run.py`` share this.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["run_benchmarks"]


def run_benchmarks(scripts: Mapping[str, Path], args: Sequence[str], *, title: str) -> int:
    """Runs every script with ``args``, in order; 0 when all exited 0, else 1."""
    failed = []
    for name, script in scripts.items():
        print(f"== {title}/{name}", flush=True)
        status = subprocess.run([sys.executable, str(script), *args]).returncode
        if status != 0:
            # A negative status is a signal (-9: SIGKILL, e.g. the OOM killer).
            failed.append(f"{name} (exit status {status})")
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
        return 1
    return 0
