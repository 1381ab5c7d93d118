#!/usr/bin/env python3
"""Where the load generator's lateness comes from on a small machine: the engine beside a
busy service, at each scheduling policy, side by side in one run.

The lab's layout on a 2-CPU machine: two sample services (the arms) pinned to CPUs 0 and 1,
the engine replaying the sample trace to both in lockstep from CPU 0 with ``--spin-us 0``
(it shares that CPU with an arm), at the demo's calibrated rate. For each ``--priority``
(normal, nice, fifo), alternating, ``--repeats`` runs of ``--duration-s``: the share of
scheduled sends the pacer itself left more than 1 ms late (``behind``: the late gate's
figure), the pacing error's p99 and max, and how long the loop waited for a CPU
(``run_delay_ms``). The machine's steal during the run is printed too: a VM that lost its
CPUs to other guests says so.

Prints a markdown table and writes bench/out/precision.json.

    python bench/precision/run.py              # 5 runs of 4 s per policy, about 2 minutes
    python bench/precision/run.py --quick      # 1 run of 2 s per policy
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

from hairline.collect.cpustat import read_cpu_times, steal_ms  # noqa: E402
from hairline.engine import find_engine  # noqa: E402

TRACE = ROOT / "examples" / "sample-service" / "trace.jsonl"
OUT = ROOT / "bench" / "out" / "precision.json"
POLICIES = ("normal", "nice", "fifo")
_LISTENING = re.compile(r"listening on (?P<host>[^:]+):(?P<port>\d+)")


def start_service(engine: Path, cpu: int) -> tuple[subprocess.Popen[str], str]:
    """A sample service pinned to ``cpu``; its URL once it listens."""
    proc = subprocess.Popen(
        ["taskset", "-c", str(cpu), str(engine), "sample-service", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    match = _LISTENING.search(proc.stdout.readline())
    if match is None:
        proc.kill()
        raise SystemExit(f"precision: the sample service on CPU {cpu} did not start")
    return proc, f"http://{match['host']}:{match['port']}"


def one_run(
    engine: Path, urls: list[str], policy: str, rate: float, duration_s: float
) -> dict[str, float]:
    """One lockstep replay from CPU 0 at ``policy``; the figures of its summary."""
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        command = ["taskset", "-c", "0", str(engine), "load", "--trace", str(TRACE),
                   "--rate", str(rate), "--duration", str(duration_s),
                   "--warmup-rate", "400", "--warmup-duration", "1.5", "--spin-us", "0",
                   "--priority", policy, "--summary", str(summary)]  # fmt: skip
        for name, url in zip("AB", urls, strict=True):
            command += ["--target", f"{name}={url}"]
        before = read_cpu_times()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        stolen = steal_ms(before, read_cpu_times(), [0, 1])
        data = json.loads(summary.read_text())
    pacing = data["pacing_error_us"]
    return {
        "behind_share": data["behind"] / max(data["scheduled"], 1),
        "pacing_p99_us": pacing["p99"] or 0.0,
        "pacing_max_us": pacing["max"] or 0.0,
        "run_delay_ms": data["scheduling"]["run_delay_ms"] or 0.0,
        "steal_ms": sum(stolen.values()),
        "policy_got": data["scheduling"]["policy"],
    }


def table(results: dict[str, list[dict[str, float]]]) -> str:
    """The markdown table: medians and worst per policy, and each against normal. Pure."""
    rows = ["| policy (got) | behind, median (worst) | pacing p99 µs, median | "
            "max µs, worst | run delay ms, median | vs normal (behind) |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    base = statistics.median(r["behind_share"] for r in results["normal"])
    for policy, runs in results.items():
        behind = [r["behind_share"] for r in runs]
        ratio = statistics.median(behind) / base if base > 0 else float("nan")
        rows.append(
            f"| {policy} ({runs[0]['policy_got']}) | {statistics.median(behind):.2%} "
            f"({max(behind):.2%}) | {statistics.median(r['pacing_p99_us'] for r in runs):.0f} | "
            f"{max(r['pacing_max_us'] for r in runs):.0f} | "
            f"{statistics.median(r['run_delay_ms'] for r in runs):.1f} | {ratio:.2f}x |"
        )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s per policy")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--rate", type=float, default=2600.0, help="per target, per second")
    args = parser.parse_args(argv)
    repeats, duration_s = (1, 2.0) if args.quick else (args.repeats, args.duration_s)
    if len(os.sched_getaffinity(0)) < 2:
        print("precision: needs two CPUs (0 and 1)")
        return 1
    engine = find_engine()
    services = [start_service(engine, cpu) for cpu in (0, 1)]
    results: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    started = time.time()
    try:
        for i in range(repeats):
            for policy in POLICIES:
                run = one_run(engine, [u for _, u in services], policy, args.rate, duration_s)
                results[policy].append(run)
                done = f"[{i + 1}/{repeats}] {policy}: behind {run['behind_share']:.2%}"
                print(f"{done}, p99 {run['pacing_p99_us']:.0f} us", file=sys.stderr, flush=True)
    finally:
        for proc, _ in services:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    print(table(results))
    steal = sum(r["steal_ms"] for runs in results.values() for r in runs)
    print(f"\nsteal on CPUs 0-1 during the runs: {steal:.0f} ms; "
          f"{repeats} x {duration_s:g} s per policy at 2 x {args.rate:g}/s")  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": ["python", "bench/precision/run.py", *argv], "started_at": started,
              "rate_per_s": args.rate, "duration_s": duration_s, "results": results}  # fmt: skip
    OUT.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
