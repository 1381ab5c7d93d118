#!/usr/bin/env python3
"""Latency the recorder adds, in front of nginx at 5,000 requests/s, in one run.

The same open-loop load (`hairline-engine load`, 5,000/s, 64 connections) goes straight to
a private nginx and through `hairline-engine record` (recording every request), alternated
a few times so that machine noise hits both alike. Twice:

1. normal disk: the trace goes to a file;
2. throttled writer: the trace goes to a FIFO read by a process that takes 1 KB/s, so the
   writer falls behind at once and samples are dropped (and counted).

For each: p50/p99/p99.9 of latency (corrected for coordinated omission) direct and through
the recorder, the added p99 and the ratio, and the recorder's CPU time per request. The
goal is at most 0.2 ms added at p99 in both cases: a slow disk must not add latency.

On a shared or virtualised machine, pauses of the load generator's core (other work, the
hypervisor) show up as late sends and dwarf a 0.2 ms difference. A run in which more than
1% of sends were late fails the engine's own validity gate and measures the machine, not
the proxy, so the headline figures are medians over the pairs in which both runs were valid;
the medians over all pairs are reported beside them.

The load engine is pinned to the first core, nginx and the recorder to the second (the
recorder runs beside the service it records, as in production). Prints a markdown table and
writes bench/out/record.json.

    python bench/record/run.py            # 6 pairs of 10 s per case, about 5 minutes
    python bench/record/run.py --quick    # 1 pair of 4 s per case, for checking the harness
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]
OUT_FILE = REPO / "bench" / "out" / "record.json"
RATE_PER_S = 5_000.0
CONNECTIONS = 64
GOAL_ADDED_P99_MS = 0.2
# The slow reader of the throttled case: this many bytes per second.
SLOW_READER_BYTES_PER_S = 1024
SETTLE_S = 1.0
STATS_PATH = "/__hairline/stats"


def log(message: str) -> None:
    print(f"[bench/record] {message}", file=sys.stderr, flush=True)


def engine_bench() -> ModuleType:
    """bench/engine/run.py, for its private nginx, core plan and machine facts."""
    path = REPO / "bench" / "engine" / "run.py"
    spec = importlib.util.spec_from_file_location("hairline_bench_engine", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


EB = engine_bench()


# --------------------------------------------------------------------------- recorder


class Recorder:
    """`hairline-engine record` in front of `upstream`, pinned to `core`."""

    def __init__(self, engine: Path, core: int, upstream: str, out: Path) -> None:
        self.engine = engine
        self.core = core
        self.upstream = upstream
        self.out = out
        self.port = EB.free_port()
        self.proc: subprocess.Popen[str] | None = None
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed in __exit__)
        self.final: dict[str, int] = {}
        self.command = EB.pinned(
            core,
            [
                str(engine),
                "record",
                "--listen",
                f"127.0.0.1:{self.port}",
                "--upstream",
                upstream,
                "--out",
                str(out),
            ],
        )

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def __enter__(self) -> Recorder:
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.PIPE, stderr=self.stderr, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("listening on"):
            raise RuntimeError(f"recorder did not start: {line!r} {self.stderr_text()}")
        return self

    def cpu_s(self) -> float:
        """User and system CPU time of the recorder so far (all its threads)."""
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def stats(self) -> dict[str, int]:
        with urllib.request.urlopen(self.url(STATS_PATH), timeout=5) as resp:
            counters: dict[str, int] = json.loads(resp.read())
            return counters

    def stderr_text(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        lines = [ln for ln in self.stderr_text().splitlines() if ln.startswith("{")]
        self.final = json.loads(lines[-1]) if lines else {}
        self.stderr.close()


@contextlib.contextmanager
def slow_fifo(directory: Path) -> Iterator[Path]:
    """A FIFO whose only reader takes SLOW_READER_BYTES_PER_S."""
    fifo = directory / "trace.fifo"
    os.mkfifo(fifo)
    reader_code = (
        "import sys, time\n"
        f"f = open({str(fifo)!r}, 'rb', buffering=0)\n"
        "while True:\n"
        f"    if not f.read({SLOW_READER_BYTES_PER_S}):\n"
        "        break\n"
        "    time.sleep(1)\n"
    )
    reader = subprocess.Popen([sys.executable, "-c", reader_code])
    try:
        yield fifo
    finally:
        reader.kill()
        reader.wait()


# --------------------------------------------------------------------------- load


def load(engine: Path, core: int, url: str, duration_s: float) -> dict[str, Any]:
    summary = EB.run_engine(
        engine,
        {"a": url},
        rate_per_s=RATE_PER_S,
        duration_s=duration_s,
        core=core,
        connections=CONNECTIONS,
    )
    target = EB.per_target(summary, "a")
    return {
        "command": summary["_command"],
        "latency_us": target.get("latency_us", {}),
        "uncorrected_latency_us": target.get("uncorrected_latency_us", {}),
        "requests": target.get("requests"),
        "errors": target.get("errors"),
        "late_sends": summary.get("late_sends"),
        "valid": summary.get("valid"),
        "load_core_steal_ms": summary["_steal_ms"],
    }


def pairs(
    engine: Path,
    load_core: int,
    direct_url: str,
    recorder: Recorder,
    repeats: int,
    duration_s: float,
    label: str,
) -> list[dict[str, Any]]:
    """Alternates direct and recorded runs; one pair per repeat, order swapped each time."""
    runs = []
    for i in range(repeats):
        pair: dict[str, Any] = {}
        order = ["direct", "recorder"] if i % 2 == 0 else ["recorder", "direct"]
        for which in order:
            time.sleep(SETTLE_S)
            log(f"{label}: {which} ({i + 1} of {repeats})")
            if which == "direct":
                pair["direct"] = load(engine, load_core, direct_url, duration_s)
            else:
                before, cpu_before = recorder.stats(), recorder.cpu_s()
                pair["recorder"] = load(engine, load_core, recorder.url("/index.html"), duration_s)
                after, cpu = recorder.stats(), recorder.cpu_s() - cpu_before
                pair["recorder"]["counters"] = {k: after[k] - before[k] for k in after}
                proxied = pair["recorder"]["counters"]["proxied"]
                pair["recorder"]["cpu_us_per_request"] = cpu / proxied * 1e6 if proxied else None
        runs.append(pair)
    return runs


def quantile(run: dict[str, Any], key: str, q: str) -> float | None:
    value = run.get(key, {}).get(q)
    return float(value) if value is not None else None


def side_medians(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Medians over the pairs of each side's quantiles, the added p99 and the ratio."""
    out: dict[str, Any] = {"pairs": len(runs)}
    for side in ("direct", "recorder"):
        for q in ("p50", "p99", "p999"):
            values = [v for r in runs if (v := quantile(r[side], key, q)) is not None]
            out[f"{side}_{q}_us"] = statistics.median(values) if values else None
    added = [
        (rec - direct) / 1e3
        for r in runs
        if (rec := quantile(r["recorder"], key, "p99")) is not None
        and (direct := quantile(r["direct"], key, "p99")) is not None
    ]
    out["added_p99_ms_per_pair"] = added
    out["added_p99_ms"] = statistics.median(added) if added else None
    d, rc = out["direct_p99_us"], out["recorder_p99_us"]
    out["p99_ratio"] = rc / d if d and rc is not None else None
    return out


def summarise(runs: list[dict[str, Any]], key: str = "latency_us") -> dict[str, Any]:
    """The figures over the pairs where both runs passed the engine's validity gates, and
    over all pairs."""
    valid = [r for r in runs if r["direct"].get("valid") and r["recorder"].get("valid")]
    cpu = [c for r in runs if (c := r["recorder"].get("cpu_us_per_request")) is not None]
    return {
        "valid_pairs": side_medians(valid, key) if valid else None,
        "all_pairs": side_medians(runs, key),
        "recorder_cpu_us_per_request": statistics.median(cpu) if cpu else None,
    }


# --------------------------------------------------------------------------- report


def fmt_us(value: float | None) -> str:
    return "—" if value is None else f"{value / 1e3:.3f}"


def table(results: dict[str, Any]) -> str:
    rows = [
        "| case | pairs | direct p50 / p99 / p99.9 (ms) | through recorder p50 / p99 / p99.9 (ms) "
        "| added p99 (ms) | p99 ratio | recorder CPU per request (µs) | dropped | goal |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case in ("normal_disk", "throttled_writer"):
        block = results.get(case)
        if not block:
            continue
        summary = block["summary"]["latency_us"]
        cpu = summary["recorder_cpu_us_per_request"]
        for which in ("valid_pairs", "all_pairs"):
            s = summary[which]
            if s is None:
                rows.append(f"| {case.replace('_', ' ')} | 0 valid | — | — | — | — | — | — | |")
                continue
            added = s["added_p99_ms"]
            ratio = s["p99_ratio"]
            pairs_text = f"{s['pairs']} {'valid' if which == 'valid_pairs' else 'all'}"
            rows.append(
                f"| {case.replace('_', ' ')} | {pairs_text} "
                f"| {fmt_us(s['direct_p50_us'])} / {fmt_us(s['direct_p99_us'])} / "
                f"{fmt_us(s['direct_p999_us'])} "
                f"| {fmt_us(s['recorder_p50_us'])} / {fmt_us(s['recorder_p99_us'])} / "
                f"{fmt_us(s['recorder_p999_us'])} "
                f"| {'—' if added is None else f'{added:+.3f}'} "
                f"| {'—' if ratio is None else f'{ratio:.2f}x'} "
                f"| {'—' if cpu is None else f'{cpu:.1f}'} "
                f"| {block['dropped']:,} of {block['sampled']:,} "
                f"| ≤ {GOAL_ADDED_P99_MS} |"
            )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short pair per case")
    parser.add_argument("--no-install", action="store_true", help="never install tools")
    parser.add_argument("--out", type=Path, default=OUT_FILE, help="JSON results file")
    parser.add_argument("--repeats", type=int, help="pairs per case (default 6; 1 with --quick)")
    parser.add_argument("--duration", type=float, help="seconds per run (default 10; 4 quick)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 6)
    duration_s = args.duration or (4.0 if args.quick else 10.0)

    tools = EB.ensure_tools(install=not args.no_install)
    if tools.nginx is None or tools.engine is None:
        log("nginx and hairline-engine are required: " + "; ".join(tools.notes))
        return 2
    engine: Path = tools.engine
    load_core, server_core, core_note = EB.cpu_plan()
    facts = EB.machine_facts()
    results: dict[str, Any] = {
        "machine": facts,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cores": {"load": load_core, "nginx_and_recorder": server_core, "note": core_note},
        "versions": {
            "nginx": EB.tool_version([str(tools.nginx), "-v"]),
            "engine": EB.tool_version([str(engine), "--version"]),
        },
        "settings": {
            "rate_per_s": RATE_PER_S,
            "connections": CONNECTIONS,
            "duration_s": duration_s,
            "repeats": repeats,
            "sampling": "all",
            "slow_reader_bytes_per_s": SLOW_READER_BYTES_PER_S,
        },
        "notes": [],
    }
    if facts["busy_cores_before"] > 0.1:
        results["notes"].append(
            f"the machine was shared during the run ({facts['busy_cores_before']:.2f} cores "
            "busy with other work just before it); figures are disturbed"
        )
    with EB.Nginx(tools.nginx, server_core, [EB.free_port()]) as nginx, EB.workdir() as tmp:
        direct = nginx.url(0)
        upstream = direct.rsplit("/", 1)[0]
        cases: list[tuple[str, contextlib.AbstractContextManager[Path]]] = [
            ("normal_disk", contextlib.nullcontext(tmp / "trace.jsonl")),
            ("throttled_writer", slow_fifo(tmp)),
        ]
        for case, out_path in cases:
            with out_path as out, Recorder(engine, server_core, upstream, out) as rec:
                runs = pairs(engine, load_core, direct, rec, repeats, duration_s, case)
            results[case] = {
                "recorder_command": " ".join(rec.command),
                "runs": runs,
                "final_counters": rec.final,
                "sampled": rec.final.get("sampled", 0),
                "dropped": rec.final.get("dropped", 0),
                "summary": {
                    key: summarise(runs, key) for key in ("latency_us", "uncorrected_latency_us")
                },
            }
    results["machine"]["busy_cores_after"] = round(EB.busy_cores(), 2)
    results["machine"]["steal_ms_during_run"] = (
        sum(EB.steal_ms(c) for c in os.sched_getaffinity(0)) - facts["steal_ms_total_before"]
    )
    if results["machine"]["busy_cores_after"] > 0.1 and facts["busy_cores_before"] <= 0.1:
        results["notes"].append(
            f"the machine was shared during the run ({results['machine']['busy_cores_after']:.2f}"
            " cores busy with other work just after it); figures may be disturbed"
        )
    results["table"] = table(results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(results["table"])
    for note in results["notes"]:
        print(f"\nnote: {note}")
    print(f"\nresults: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
