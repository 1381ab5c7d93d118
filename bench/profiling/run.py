#!/usr/bin/env python3
"""Which function regressed, measured: per-function profiling against known truth.

    python bench/profiling/run.py                    # 5 A/B and 10 A/A runs of the example
    python bench/profiling/run.py --ab 2 --aa 2      # fewer
    python bench/profiling/run.py --overhead-only    # only the sampling's cost

1. **A/B.** `examples/sample-service/functions.toml` as it is: arm B makes escape_strings
   (about 1% of the sample service's CPU) 20% slower, +0.2% of the service; ten trials of
   10 s batches at the calibrated 60% busy. Per run: the service-level verdict on
   cpu_ns_per_request, whether escape_strings' own cost is flagged, whether render_json's
   inclusive cost (its caller) is, and which other function's own cost is (a sibling).
2. **A/A.** `hairline aa` of the same file: every function flagged is a false discovery.
3. **Overhead.** The sample service alone on CPU 1 at 2,000 requests/s (the engine on CPU
   0), its CPU per request read from /proc over 5 s windows, perf sampling its CPU
   (`-a -C 1`) in every other window, 10 pairs, the order alternated, CPU time from the
   threads' schedstat (nanoseconds): at 999 and 4,999 Hz with DWARF stacks, with frame
   pointers (the engine is built with them: .cargo/config.toml) and without stacks
   (`--variants`).

Writes bench/out/profiling.json. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _sample_lab import ROOT, cpu_verdict, run_json

OUT = ROOT / "bench" / "out" / "profiling.json"
FILE = ROOT / "examples" / "sample-service" / "functions.toml"
STAGES = "hairline_engine::sample::stages::"
SLOWED = STAGES + "escape_strings"
CALLER = STAGES + "render_json"


def engine() -> str:
    if os.environ.get("HAIRLINE_ENGINE"):
        return os.environ["HAIRLINE_ENGINE"]
    found = shutil.which("hairline-engine", path=str(Path(sys.executable).parent))
    if found is None:
        raise SystemExit("hairline-engine is not beside this Python: run `make build` first")
    return found


def functions_of(report: dict[str, Any]) -> dict[str, Any]:
    comparisons = report["functions"]["comparisons"]
    if not comparisons:
        raise SystemExit(f"no function metrics: {report['functions']['note']}")
    return dict(comparisons[0])


def one(command: str, home: Path) -> dict[str, Any]:
    report, wall_s = run_json(command, FILE, home)
    fa = functions_of(report)
    flagged = {(c["function"], c["cost"]): c for c in fa["changed"]}
    cpu = cpu_verdict(report)
    row = {
        "wall_s": round(wall_s, 1),
        "service_cpu": {k: cpu[k] for k in ("verdict", "effect_rel", "ci_rel", "p_adjusted")},
        "samples_per_batch": fa["samples_per_batch"],
        "compared": fa["compared"],
        "flagged": [
            {k: c[k] for k in ("function", "cost", "effect_rel", "p_adjusted", "verdict")}
            for c in fa["changed"]
        ],
        "found": (SLOWED, "self") in flagged,
        "caller_found": (CALLER, "inclusive") in flagged,
        "siblings": sorted(f for f, cost in flagged if cost == "self" and f != SLOWED),
    }
    escape = next((c for c in fa["functions"] if (c["function"], c["cost"]) == (SLOWED, "self")),
                  None)  # fmt: skip
    row["escape_effect_rel"] = escape["effect_rel"] if escape else None
    return row


def cpu_s(pid: int) -> float:
    """The process's CPU time to the nanosecond: the sum of its threads' schedstat run
    times (/proc/PID/stat's utime and stime move in 10 ms ticks, which made each 5 s
    window's reading uncertain by a few percent)."""
    total_ns = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total_ns += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just ended
            continue
    return total_ns / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# perf's stack options per call_graph setting (none: the sampled function alone).
STACKS = {"dwarf": ["--call-graph", "dwarf,8192"], "fp": ["--call-graph", "fp"]}


def overhead(pairs: int, frequency_hz: int, window_s: float, call_graph: str) -> dict[str, Any]:
    """CPU per request of the sample service with and without perf sampling its CPU."""
    port = free_port()
    service = subprocess.Popen(
        ["taskset", "-c", "1", engine(), "sample-service", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    time.sleep(1.0)
    per_request: dict[bool, list[float]] = {False: [], True: []}
    trace = ROOT / "examples" / "sample-service" / "trace.jsonl"
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(pairs):
                order = (False, True) if i % 2 == 0 else (True, False)
                for sampled in order:
                    perf = None
                    if sampled:
                        perf = subprocess.Popen(
                            ["taskset", "-c", "1", "perf", "record", "-e", "cpu-clock", "-F",
                             str(frequency_hz), "-a", "-C", "1", "-q",
                             *STACKS.get(call_graph, []),
                             "-o", f"{tmp}/p.data"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                        )  # fmt: skip
                        time.sleep(1.0)
                    before = cpu_s(service.pid)
                    done = subprocess.run(
                        ["taskset", "-c", "0", engine(), "load", "--target",
                         f"s=http://127.0.0.1:{port}", "--trace", str(trace), "--rate", "2000",
                         "--duration", str(window_s)],
                        capture_output=True, text=True, check=True,
                    )  # fmt: skip
                    used = cpu_s(service.pid) - before
                    summary = json.loads(done.stdout)
                    requests = next(iter(summary["targets"].values()))["requests"]
                    per_request[sampled].append(used / max(requests, 1) * 1e9)
                    if perf is not None:
                        perf.send_signal(signal.SIGINT)
                        perf.wait()
    finally:
        service.kill()
        service.wait()
    ratios = [s / u for s, u in zip(per_request[True], per_request[False], strict=True)]
    mean = statistics.mean(ratios)
    half = 2.262 * statistics.stdev(ratios) / len(ratios) ** 0.5 if len(ratios) > 1 else 0.0
    return {
        "frequency_hz": frequency_hz,
        "call_graph": call_graph,
        "pairs": pairs,
        "window_s": window_s,
        "unsampled_ns_per_request": per_request[False],
        "sampled_ns_per_request": per_request[True],
        "overhead": mean - 1,
        "overhead_ci95": [mean - 1 - half, mean - 1 + half],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ab", type=int, default=5)
    parser.add_argument("--aa", type=int, default=10)
    parser.add_argument("--overhead-pairs", type=int, default=10)
    parser.add_argument("--overhead-only", action="store_true")
    parser.add_argument(
        "--variants",
        default="999:dwarf,4999:dwarf,999:fp,4999:fp,4999:none",
        help="the perf settings whose overhead is measured, FREQUENCY_HZ:CALL_GRAPH,...",
    )
    args = parser.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("perf is not installed (make sysdeps installs linux-perf)")
    results: dict[str, Any] = {"file": str(FILE.relative_to(ROOT)), "started": time.time()}
    results["overhead"] = [
        overhead(args.overhead_pairs, hz, 5.0, graph)
        for hz, graph in ((int(v.split(":")[0]), v.split(":")[1]) for v in args.variants.split(","))
    ]
    for o in results["overhead"]:
        print(o["frequency_hz"], o["call_graph"], f"{o['overhead']:+.2%}",
              [f"{x:+.2%}" for x in o["overhead_ci95"]], flush=True)  # fmt: skip
    if not args.overhead_only:
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            results["ab"], results["aa"] = [], []
            for i in range(max(args.ab, args.aa)):
                if i < args.ab:
                    results["ab"].append(one("run", home / f"ab{i}"))
                    print("A/B", json.dumps(results["ab"][-1]), flush=True)
                if i < args.aa:
                    results["aa"].append(one("aa", home / f"aa{i}"))
                    print("A/A", json.dumps(results["aa"][-1]), flush=True)
        ab, aa = results["ab"], results["aa"]
        results["summary"] = {
            "ab_runs": len(ab),
            "found": sum(r["found"] for r in ab),
            "caller_found": sum(r["caller_found"] for r in ab),
            "runs_with_a_sibling": sum(bool(r["siblings"]) for r in ab),
            "service_level_regressions": sum(
                r["service_cpu"]["verdict"] == "regression" for r in ab
            ),
            "aa_runs": len(aa),
            "aa_runs_with_a_finding": sum(bool(r["flagged"]) for r in aa),
            "aa_findings": sum(len(r["flagged"]) for r in aa),
        }
        print(json.dumps(results["summary"], indent=1))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
