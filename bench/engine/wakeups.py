#!/usr/bin/env python3
"""The engine's own CPU per request when it shares a CPU with an arm and sleeps on its
timer before each send (``--spin-us 0``, the lab's layout on a small machine; issue #30).

Layout: two nginx targets (one worker each, a static file), pinned to CPUs 0 and 1; the
engine on CPU 0 beside the first, replaying ``/index.html`` to both in lockstep. For each
rate and each variant (engine flags, e.g. ``off=`` and ``on=--coalesce-us 50``; a first word
``@PATH`` runs the engine binary at PATH instead, to compare two builds), alternating
so whatever else the machine does falls on all alike, ``--repeats`` runs of
``--duration-s``. Per run: the engine process's user+sys CPU (its rusage when it exits,
warm-up included) divided by the requests it wrote (every target's, warm-up included); the
pacing figures of its summary (``behind`` share, ``late_sends`` share, pacing error p50 and
p99, the Poisson fit's p-value with ``--arrival poisson``); the steal on CPUs 0-1 and CPU
0's busy share from /proc/stat (the JSON only: its 10 ms ticks read below the engine's own
share in some runs on a VM).

Prints a markdown table (medians over repeats, and each variant against the first) and
writes bench/out/wakeups.json.

    python bench/engine/wakeups.py                                    # as is, 3 rates
    python bench/engine/wakeups.py --variant off= --variant 'on=--coalesce-us 50'
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out" / "wakeups.json"
sys.path.insert(0, str(ROOT / "python"))

from hairline.collect.cpustat import read_cpu_times, steal_ms  # noqa: E402
from hairline.engine import find_engine  # noqa: E402

# bench/engine/run.py's nginx (one worker, static file, started pinned, stopped on exit).
_spec = importlib.util.spec_from_file_location(
    "bench_engine_run", Path(__file__).with_name("run.py")
)
assert _spec is not None and _spec.loader is not None
_run = importlib.util.module_from_spec(_spec)
sys.modules["bench_engine_run"] = _run
_spec.loader.exec_module(_run)
Nginx = _run.Nginx
free_port = _run.free_port


def one_run(
    engine: Path, urls: list[str], rate: float, duration_s: float, arrival: str, extra: list[str]
) -> dict[str, Any]:
    """One lockstep replay from CPU 0; the engine's CPU per request and its pacing."""
    if extra and extra[0].startswith("@"):
        engine, extra = Path(extra[0][1:]), extra[1:]
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        command = ["taskset", "-c", "0", str(engine), "load", "--path", "/index.html",
                   "--rate", str(rate), "--duration", str(duration_s), "--arrival", arrival,
                   "--warmup-duration", "0.5", "--spin-us", "0", "--summary", str(summary),
                   *extra]  # fmt: skip
        for name, url in zip("AB", urls, strict=True):
            command += ["--target", f"{name}={url}"]
        before = read_cpu_times()
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        # taskset execs the engine: this pid's rusage is the engine's own CPU.
        _, status, usage = os.wait4(proc.pid, 0)
        wall_s = time.monotonic() - started
        after = read_cpu_times()
        stderr = proc.stderr.read().decode() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"wakeups: the engine failed: {stderr[-2000:]}")
        data = json.loads(summary.read_text())
    written = sum(t["sent"] for t in data["targets"].values()) + data["warmup"]["requests"] * len(
        urls
    )
    cpu_s = usage.ru_utime + usage.ru_stime
    busy0 = after[0].busy - before[0].busy
    total0 = busy0 + after[0].idle - before[0].idle
    ks = data["poisson_ks"]
    pacing = data["pacing_error_us"]
    scheduled = max(data["scheduled"], 1)
    return {
        "cpu_us_per_request": cpu_s * 1e6 / max(written, 1),
        "engine_cpu_share": cpu_s / wall_s,
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "written": written,
        "behind_share": data["behind"] / scheduled,
        "late_share": data["late_sends"] / scheduled,
        "pacing_p50_us": pacing["p50"] or 0.0,
        "pacing_p99_us": pacing["p99"] or 0.0,
        "poisson_p": ks["p"] if ks else None,
        "valid": data["valid"],
        "failed_gates": [g["name"] for g in data["gates"] if not g["passed"]],
        "cpu0_busy": busy0 / max(total0, 1),
        "steal_ms": sum(steal_ms(before, after, [0, 1]).values()),
        "policy": data["scheduling"]["policy"],
    }


def table(results: dict[str, dict[str, list[dict[str, Any]]]]) -> str:
    """Medians per rate and variant, and CPU per request against the first variant. Pure."""
    rows = ["| rate (each of 2) | variant | engine CPU µs/request | vs first | engine CPU share | "
            "behind | late | pacing p50 / p99 µs | Poisson p (min) | valid |",
            "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for rate, variants in results.items():
        base: float | None = None
        for name, runs in variants.items():

            def med(key: str, runs: list[dict[str, Any]] = runs) -> float:
                return statistics.median(float(r[key]) for r in runs)

            cpu = med("cpu_us_per_request")
            base = cpu if base is None else base
            ps = [r["poisson_p"] for r in runs if r["poisson_p"] is not None]
            rows.append(
                f"| {rate} | {name} | {cpu:.1f} | {cpu / base:.2f}x | "
                f"{med('engine_cpu_share'):.0%} | "
                f"{med('behind_share'):.3%} | {med('late_share'):.3%} | "
                f"{med('pacing_p50_us'):.0f} / {med('pacing_p99_us'):.0f} | "
                f"{f'{min(ps):.3g}' if ps else '-'} | "
                f"{sum(bool(r['valid']) for r in runs)}/{len(runs)} |"
            )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rates", default="2000,5000,8000", help="per target, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration-s", type=float, default=4.0)
    parser.add_argument("--arrival", choices=("constant", "poisson"), default="constant")
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME=FLAGS",
        help="engine flags to compare (repeat); default: one variant, the flags as they are",
    )  # fmt: skip
    args = parser.parse_args(argv)
    variants = {
        name: flags.split() for name, _, flags in (v.partition("=") for v in args.variant)
    } or {"as is": []}
    rates = [float(r) for r in args.rates.split(",")]
    nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
    engine = find_engine()
    results: dict[str, dict[str, list[dict[str, Any]]]] = {
        f"{r:,.0f}/s": {v: [] for v in variants} for r in rates
    }
    started = time.time()
    with (
        Nginx(Path(nginx_bin), 0, [free_port()]) as a,
        Nginx(Path(nginx_bin), 1, [free_port()]) as b,
    ):
        urls = [a.url(0).removesuffix("/index.html"), b.url(0).removesuffix("/index.html")]
        for i in range(args.repeats):
            for rate in rates:
                for name, flags in variants.items():
                    run = one_run(engine, urls, rate, args.duration_s, args.arrival, flags)
                    results[f"{rate:,.0f}/s"][name].append(run)
                    done = f"[{i + 1}/{args.repeats}] {rate:g}/s {name}"
                    cpu = f"{run['cpu_us_per_request']:.1f} us/request"
                    print(f"{done}: {cpu}, behind {run['behind_share']:.2%}", file=sys.stderr)
    print(table(results))
    steal = sum(r["steal_ms"] for v in results.values() for runs in v.values() for r in runs)
    runs = f"{args.repeats} x {args.duration_s:g} s (+0.5 s warm-up) per rate and variant"
    print(f"\nsteal on CPUs 0-1 during the runs: {steal:.0f} ms; {runs}, {args.arrival}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": ["python", "bench/engine/wakeups.py", *argv], "started_at": started,
              "engine": str(engine), "results": results}  # fmt: skip
    OUT.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
