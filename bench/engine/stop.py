#!/usr/bin/env python3
"""How long the sample service takes to stop after SIGTERM: each lab batch stops two.

    python bench/engine/stop.py                       # the venv's engine, 20 stops
    python bench/engine/stop.py --engine A --engine B --stops 50 --json out.json

Each stop: start ``hairline-engine sample-service --port 0``, wait for its "listening on"
line and ``--idle-s`` more (so its workers are mid-way through an idle poll), send SIGTERM,
time until it exits. Prints the median and the worst per engine; with two engines (the one
before a change and the one after) they alternate, so whatever else the machine does falls
on both alike.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def one_stop_ms(engine: str, idle_s: float) -> float:
    proc = subprocess.Popen(
        [engine, "sample-service", "--host", "127.0.0.1", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        if not proc.stdout.readline().startswith(b"listening on"):
            raise SystemExit(f"{engine}: the sample service did not start")
        time.sleep(idle_s)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        return (time.monotonic() - started) * 1000
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", action="append", help="hairline-engine to time (repeat)")
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--idle-s", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="5 stops")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    engines = args.engine or [
        shutil.which("hairline-engine") or str(Path(sys.executable).with_name("hairline-engine"))
    ]
    stops = 5 if args.quick else args.stops
    times: dict[str, list[float]] = {e: [] for e in engines}
    for _ in range(stops):
        for engine in engines:
            times[engine].append(one_stop_ms(engine, args.idle_s))
    rows = {
        e: {
            "median_ms": round(statistics.median(t), 2),
            "max_ms": round(max(t), 2),
            "stops": len(t),
        }
        for e, t in times.items()
    }
    for engine, row in rows.items():
        median, worst, n = row["median_ms"], row["max_ms"], row["stops"]
        print(f"{engine}: median {median} ms, worst {worst} ms over {n} stops")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
