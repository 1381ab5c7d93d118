#!/usr/bin/env python3
"""The lockstep skew as tests/engine/test_load.py measures it, run after run: what its
bounds are set from.

Each run is the test's: two sample services (one worker thread each), the engine at
500/s for 2 s sending every request id to both, the skew read from the request records
(each write's time: due time plus corrected less uncorrected latency). ``--pinned`` (the
test's layout) puts the engine on the last CPU and the services on the others, as the lab
places them; without it everything shares every CPU. ``--neighbour`` runs a CPU-bound
process beside it all (stopped at the end). Prints the spread over runs of each run's
median, p95 and p99 and its ticks more than 1 ms apart, and writes every run to
bench/out/lockstep.json.

    python bench/engine/lockstep.py --runs 100 --pinned
    python bench/engine/lockstep.py --runs 100 --pinned --neighbour
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out" / "lockstep.json"
sys.path.insert(0, str(ROOT / "python"))

import numpy as np  # noqa: E402

from hairline.engine import LoadPlan, find_engine, read_requests, run_load  # noqa: E402
from hairline.kit.procs import thread_pinned_to  # noqa: E402

_LISTENING = re.compile(r"listening on ([\d.]+):(\d+)")


def _service(engine: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [str(engine), "sample-service", "--port", "0", "--warmup-s", "0", "--threads", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    match = _LISTENING.search(proc.stdout.readline())
    if match is None:
        proc.kill()
        raise SystemExit("the sample service did not start")
    return proc, f"http://{match[1]}:{match[2]}"


def one_run(engine: Path, work: Path, *, pinned: bool) -> dict[str, Any]:
    cpus = sorted(os.sched_getaffinity(0))
    services = cpus[:-1] if pinned else cpus
    with thread_pinned_to(services):
        (proc_a, url_a), (proc_b, url_b) = _service(engine), _service(engine)
    try:
        time.sleep(0.2)  # the services' listening threads up
        plan = LoadPlan(
            targets=(("a", url_a), ("b", url_b)), paths=("/api/profile",), rate_per_s=500,
            duration_s=2, requests_path=work / "requests.bin",
        )  # fmt: skip
        result = run_load(plan, cpus=cpus[-1:] if pinned else None)
        records = read_requests(work / "requests.bin")
    finally:
        for proc in (proc_a, proc_b):
            proc.kill()
            proc.wait()
    sent = []
    for t in result.targets.values():
        mine = np.sort(records[records["target"] == t.index], order="request_id")
        waited = mine["latency_ns"].astype(np.int64) - mine["uncorrected_ns"].astype(np.int64)
        sent.append(mine["intended_ns"].astype(np.int64) + waited)
    apart_us = np.abs(sent[0] - sent[1]) / 1e3
    p50, p95, p99 = np.percentile(apart_us, [50, 95, 99])
    return {
        "median_us": float(p50), "p95_us": float(p95), "p99_us": float(p99),
        "max_us": float(apart_us.max()), "over_1ms_share": float(np.mean(apart_us > 1000)),
        "engine_p50_us": result.dispatch_skew_us.p50,
        "engine_count": result.dispatch_skew_us.count,
    }  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--pinned", action="store_true", help="the engine on a CPU of its own")
    parser.add_argument("--neighbour", action="store_true", help="a CPU-bound process beside")
    args = parser.parse_args(argv)
    engine = find_engine()
    if engine is None:
        raise SystemExit("hairline-engine not found (make build, or set HAIRLINE_ENGINE)")
    hog = None
    if args.neighbour:
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    runs = []
    try:
        with tempfile.TemporaryDirectory(prefix="hairline-lockstep-") as tmp:
            for n in range(args.runs):
                runs.append(one_run(engine, Path(tmp), pinned=args.pinned))
                print(n, json.dumps(runs[-1]), flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    print(f"{len(runs)} runs, {'pinned' if args.pinned else 'unpinned'}, "
          f"{'a CPU-bound neighbour' if args.neighbour else 'no neighbour of its own'}; "
          "spread over runs (min / median / max):")  # fmt: skip
    for key in ("median_us", "p95_us", "p99_us", "max_us", "over_1ms_share"):
        values = np.array([r[key] for r in runs])
        print(f"  {key:>15}: {values.min():.4g} / {np.median(values):.4g} / {values.max():.4g}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"pinned": args.pinned, "neighbour": args.neighbour,
                               "runs": runs}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
