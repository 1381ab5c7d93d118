#!/usr/bin/env python3
"""Capacity mode's search against plain bisection (mutilate's ``--search``), on the real
sample service with a known knee.

The service is ``hairline-engine sample-service --work sleep --threads 1`` pinned to the
last CPU, the engine to the first: a sleeping worker thread has a knee that a noisy 2-CPU
VM does not move much. The reference knee (the highest rate whose p99 stays under the SLO
at full duration) is established once by a fine scan at full duration (1% steps) and kept in
bench/out/capacity-reference.json (``--reference`` measures it again). Then each method
runs ``--repeats`` times, each with a fresh ``--control`` run, and reports the seconds of
load it needed (the probes' durations), its wall time, and how far its answer is from the
reference. Goal: the search needs at most half of bisection's load-seconds at the same
accuracy (every answer within 2%).

Prints a markdown table and writes bench/out/capacity.json.

    python bench/capacity/run.py                 # about 12 minutes with the reference known
    python bench/capacity/run.py --quick         # 2 repeats, for checking the harness
    python bench/capacity/run.py --reference     # scan for the reference knee first (~4 min)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, replace
from pathlib import Path

from hairline import engine
from hairline.capacity.search import (
    SearchOutcome,
    SearchSettings,
    bisect_capacity,
    probe_failure,
    search_capacity,
)
from hairline.lab.capacity import CONNECTIONS, INTERVAL_MS, ControlledProber

REPO = Path(__file__).resolve().parents[2]
OUT_FILE = REPO / "bench" / "out" / "capacity.json"
REFERENCE_FILE = REPO / "bench" / "out" / "capacity-reference.json"
TRACE = REPO / "examples" / "sample-service" / "trace.jsonl"
SETTINGS = SearchSettings(
    slo_p99_ms=20.0,
    start_rate_per_s=200.0,
    confirm_s=10.0,
    probe_s=1.0,
    tolerance=0.02,
)
# The reference scan: each step at this many seconds, this fine around the bisected knee.
REFERENCE_S = 10.0
REFERENCE_STEP = 0.01
REFERENCE_SPAN = 0.05


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def sample_service(cpu: int) -> Iterator[str]:
    """The sleeping single-thread sample service on ``cpu``; yields its URL."""
    binary = engine.find_engine()
    proc = subprocess.Popen(
        ["taskset", "-c", str(cpu), str(binary), "sample-service", "--port", "0",
         "--work", "sleep", "--threads", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("listening on "):
            raise RuntimeError(f"sample-service said {line!r}")
        yield "http://" + line.removeprefix("listening on ")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def run_method(
    method: Callable[..., SearchOutcome], url: str, settings: SearchSettings
) -> tuple[SearchOutcome, float]:
    """One search with a --control run of its own; the outcome and its wall seconds."""
    plan = engine.LoadPlan(
        targets=(("svc", url),),
        trace=TRACE,
        rate_per_s=settings.start_rate_per_s,
        duration_s=0,
        interval_ms=INTERVAL_MS,
        connections=CONNECTIONS,
    )
    started = time.monotonic()
    with engine.ControlledLoad(plan) as load:
        outcome = method(ControlledProber(load, settings), settings)
    return outcome, time.monotonic() - started


def reference_knee(url: str) -> dict[str, object]:
    """Bisection at REFERENCE_S, then every rate within ±REFERENCE_SPAN in REFERENCE_STEP
    steps at REFERENCE_S; the knee is the highest rate that passed with every rate below
    it in the scan passing too."""
    long = replace(SETTINGS, confirm_s=REFERENCE_S, tolerance=0.03)
    coarse, _ = run_method(bisect_capacity, url, long)
    log(f"reference: bisection at {REFERENCE_S:g} s gives {coarse.max_rate_per_s:.0f}/s")
    if coarse.max_rate_per_s == 0:
        last = coarse.probes[-1] if coarse.probes else None
        raise SystemExit(
            f"no reference knee: the bisection stopped on {coarse.stopped_by}"
            + (f" at {last.rate_per_s:.0f}/s ({last.note})" if last else "")
        )
    centre = coarse.max_rate_per_s
    steps = round(REFERENCE_SPAN / REFERENCE_STEP)
    rates = [centre * (1 + REFERENCE_STEP * i) for i in range(-steps, steps + 1)]
    plan = engine.LoadPlan(
        targets=(("svc", url),), trace=TRACE, rate_per_s=rates[0], duration_s=0,
        interval_ms=INTERVAL_MS, connections=CONNECTIONS,
    )  # fmt: skip
    scan = []
    with engine.ControlledLoad(plan) as load:
        prober = ControlledProber(load, long)
        for rate in rates:
            probe = prober(rate, REFERENCE_S)
            passed = probe.valid and probe_failure(probe, long) is None
            scan.append({"rate_per_s": rate, "p99_ms": probe.p99_ms, "passed": passed})
            log(f"reference: {rate:.0f}/s p99 {probe.p99_ms:.2f} ms {'pass' if passed else 'FAIL'}")
    knee = 0.0
    for step in scan:
        if not step["passed"]:
            break
        knee = float(step["rate_per_s"])  # type: ignore[arg-type]
    return {"knee_per_s": knee, "duration_s": REFERENCE_S, "scan": scan,
            "settings": asdict(SETTINGS)}  # fmt: skip


def summarise(runs: list[dict[str, float]], knee: float) -> dict[str, float]:
    errors = [abs(r["max_rate_per_s"] / knee - 1) for r in runs]
    return {
        "runs": len(runs),
        "load_s_mean": statistics.fmean(r["load_s"] for r in runs),
        "load_s_max": max(r["load_s"] for r in runs),
        "wall_s_mean": statistics.fmean(r["wall_s"] for r in runs),
        "probes_mean": statistics.fmean(r["probes"] for r in runs),
        "error_mean": statistics.fmean(errors),
        "error_max": max(errors),
        "within_2pct": sum(e <= 0.02 for e in errors) / len(errors),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="2 repeats")
    parser.add_argument("--reference", action="store_true", help="measure the knee again")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    cpus = sorted(os.sched_getaffinity(0))
    engine_cpu, service_cpu = cpus[0], cpus[-1]
    os.sched_setaffinity(0, {engine_cpu})  # the engine inherits it
    with sample_service(service_cpu) as url:
        if args.reference or not REFERENCE_FILE.exists():
            REFERENCE_FILE.parent.mkdir(parents=True, exist_ok=True)
            REFERENCE_FILE.write_text(json.dumps(reference_knee(url), indent=2) + "\n")
        reference = json.loads(REFERENCE_FILE.read_text())
        knee = float(reference["knee_per_s"])
        log(f"reference knee: {knee:.0f}/s (p99 <= {SETTINGS.slo_p99_ms:g} ms at "
            f"{reference['duration_s']:g} s)")  # fmt: skip
        runs: dict[str, list[dict[str, float]]] = {"search": [], "bisection": []}
        for repeat in range(repeats):
            for name, method in (("search", search_capacity), ("bisection", bisect_capacity)):
                outcome, wall_s = run_method(method, url, SETTINGS)
                runs[name].append({
                    "max_rate_per_s": outcome.max_rate_per_s, "load_s": outcome.load_s,
                    "wall_s": wall_s, "probes": len(outcome.probes),
                    "stopped_by_slo": float(outcome.stopped_by == "slo"),
                })  # fmt: skip
                log(f"{repeat + 1}/{repeats} {name}: {outcome.max_rate_per_s:.0f}/s "
                    f"({outcome.max_rate_per_s / knee - 1:+.1%}) in {outcome.load_s:.0f} s "
                    f"of load, {len(outcome.probes)} probes, {outcome.stopped_by}")  # fmt: skip
    summary = {name: summarise(r, knee) for name, r in runs.items()}
    ratio = summary["search"]["load_s_mean"] / summary["bisection"]["load_s_mean"]
    print(f"reference knee {knee:.0f}/s; SLO p99 {SETTINGS.slo_p99_ms:g} ms; "
          f"full duration {SETTINGS.confirm_s:g} s, probes {SETTINGS.probe_s:g} s\n")  # fmt: skip
    print("| method | runs | load-seconds mean (max) | wall s | probes | error mean (max) "
          "| within 2% |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, s in summary.items():
        print(f"| {name} | {s['runs']:.0f} | {s['load_s_mean']:.1f} ({s['load_s_max']:.0f}) "
              f"| {s['wall_s_mean']:.1f} | {s['probes_mean']:.1f} | {s['error_mean']:.1%} "
              f"({s['error_max']:.1%}) | {s['within_2pct']:.0%} |")  # fmt: skip
    print(f"\nsearch / bisection load-seconds: {ratio:.2f} (goal <= 0.5)")
    OUT_FILE.parent.mkdir(parents=True, exist_ok=True)
    OUT_FILE.write_text(json.dumps({
        "machine": platform.node(), "cpus": len(cpus), "knee_per_s": knee,
        "settings": asdict(SETTINGS), "runs": runs, "summary": summary, "ratio": ratio,
    }, indent=2) + "\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
