#!/usr/bin/env python3
"""The load engine against wrk and vegeta, side by side on this machine, in one run.

Every tool is pinned to one core with taskset and nginx to the other; everything stays on
127.0.0.1 and every load is bounded in time. Measures:

1. max sustained rate: the engine's highest open-loop rate with < 1% late sends, no drops,
   no errors and the achieved rate within 1% (a search over rates), against wrk's
   closed-loop requests/s and vegeta's maximum rate (-rate=0);
2. pacing error p99 at 5,000/s (the engine's own report; vegeta's estimated from its
   result timestamps), median and worst of three runs;
3. lockstep skew p99 between two nginx targets, median and worst of three runs;
4. coordinated omission: nginx is stopped (SIGSTOP) for 500 ms in a 10 s run at 2,000/s;
   the engine's corrected p99.9 must show the stall while the uncorrected one does not.

Prints a markdown table and writes bench/out/engine.json. Installs what it needs when
missing: nginx and wrk with apt-get (as root), vegeta with `go install` into bench/tools/.

    python bench/engine/run.py            # full run, about 4 minutes
    python bench/engine/run.py --quick    # shorter steps, for checking the harness
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TOOLS_DIR = REPO / "bench" / "tools"
OUT_FILE = REPO / "bench" / "out" / "engine.json"
VEGETA_MODULE = "github.com/tsenart/vegeta/v12@latest"
VEGETA_PINNED = "v12.12.0"
# Closed-loop tools get this many connections; the engine's pool gets the same.
CONNECTIONS = 64
STATIC_BODY = b"hairline bench: a small static file served by nginx.\n" * 2
PACING_RATE_PER_S = 5_000.0
CO_RATE_PER_S = 2_000.0
CO_DURATION_S = 10.0
CO_STALL_S = 0.5
CO_STALL_AT_S = 4.0
# Requests already on the wire when the target stops show the stall in uncorrected latency
# too; with fewer connections than 0.1% of the run's requests, p99.9 shows what the others do.
CO_CONNECTIONS = 8
# Pause between measurements so that closing connections of one run do not disturb the next.
SETTLE_S = 1.0
# Pacing and skew are measured this many times; one descheduling of the pinned tool by
# another process on a shared machine should not decide the figure, so the median is shown
# beside the worst run.
REPEATS = 3
LATE_SHARE_GATE = 0.01
TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
RATE_TOLERANCE = 0.01


def log(message: str) -> None:
    print(f"[bench/engine] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- tools


@dataclass
class Tools:
    engine: Path | None
    nginx: Path | None
    wrk: Path | None
    vegeta: Path | None
    notes: list[str] = field(default_factory=list)


def find_engine() -> Path | None:
    """$HAIRLINE_ENGINE, then beside this Python (a venv), then PATH, then the cargo build."""
    configured = os.environ.get("HAIRLINE_ENGINE")
    if configured:
        return Path(configured)
    candidates = [Path(sys.executable).parent / "hairline-engine"]
    on_path = shutil.which("hairline-engine")
    if on_path:
        candidates.append(Path(on_path))
    candidates.append(REPO / "target" / "release" / "hairline-engine")
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def _which(name: str) -> Path | None:
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    return Path(found) if found else None


def ensure_tools(*, install: bool) -> Tools:
    notes: list[str] = []
    missing = [pkg for pkg in ("nginx", "wrk") if _which(pkg) is None]
    if missing and install:
        if os.geteuid() == 0 and shutil.which("apt-get"):
            log(f"installing {' '.join(missing)} with apt-get")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env)
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )
        else:
            notes.append(f"missing {' '.join(missing)}: install them (apt-get) as root")
    vegeta = TOOLS_DIR / "vegeta"
    if not vegeta.exists() and install:
        go = shutil.which("go")
        if go:
            install_vegeta(go, vegeta)
        else:
            notes.append("go not found: vegeta skipped")
    return Tools(
        engine=find_engine(),
        nginx=_which("nginx"),
        wrk=_which("wrk"),
        vegeta=vegeta if vegeta.exists() else None,
        notes=notes,
    )


def install_vegeta(go: str, binary: Path) -> None:
    log(f"installing vegeta: go install {VEGETA_MODULE}")
    TOOLS_DIR.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GOBIN": str(TOOLS_DIR)}
    if subprocess.run([go, "install", VEGETA_MODULE], env=env).returncode == 0:
        return
    # `go install pkg@version` reads the module's version list (for deprecation notices),
    # which some module proxies refuse; building from a throwaway module avoids that read.
    log(f"go install failed; building vegeta {VEGETA_PINNED} from a temporary module")
    with tempfile.TemporaryDirectory(prefix="hairline-vegeta-") as tmp:
        module = VEGETA_MODULE.split("@")[0]
        (Path(tmp) / "tools.go").write_text(
            f'//go:build tools\npackage tools\n\nimport _ "{module}"\n'
        )
        for step in (
            [go, "mod", "init", "hairline-bench-tools"],
            [go, "get", f"{module}@{VEGETA_PINNED}"],
            [go, "build", "-o", str(binary), module],
        ):
            subprocess.run(step, cwd=tmp, check=True, env=env)


def engine_load_works(engine: Path, url: str) -> bool:
    """True when `hairline-engine load` exists and completes a short run with a summary."""
    help_run = subprocess.run(
        [str(engine), "load", "--help"], capture_output=True, text=True, timeout=10
    )
    if help_run.returncode != 0 or "--target" not in help_run.stdout:
        return False
    try:
        summary = run_engine(engine, {"a": url}, rate_per_s=100, duration_s=0.5)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        log(f"hairline-engine load is not usable yet: {err}")
        return False
    return bool(summary)


def vegeta_version(binary: Path) -> str:
    """The module version a Go binary was built from (vegeta's own -version is empty then)."""
    go = shutil.which("go")
    if go:
        info = subprocess.run([go, "version", "-m", str(binary)], capture_output=True, text=True)
        for line in info.stdout.splitlines():
            parts = line.split()
            if parts[:2] == ["mod", VEGETA_MODULE.split("@")[0]] and len(parts) > 2:
                return f"vegeta {parts[2]}"
    return tool_version([str(binary), "-version"])


def tool_version(command: Sequence[str]) -> str:
    try:
        run = subprocess.run(list(command), capture_output=True, text=True, timeout=10)
    except OSError:
        return "unknown"
    text = (run.stdout + run.stderr).strip().splitlines()
    return text[0] if text else "unknown"


# --------------------------------------------------------------------------- cores


def cpu_plan() -> tuple[int, int, str | None]:
    """(load core, server core, note). Two cores: one for the tool, one for nginx."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) >= 2:
        return cores[0], cores[1], None
    return cores[0], cores[0], "one CPU only: the tool and nginx share it"


def pinned(core: int, command: Sequence[str]) -> list[str]:
    return ["taskset", "-c", str(core), *command]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --------------------------------------------------------------------------- nginx


class Nginx:
    """A private nginx: one process (no daemon, no master), temporary config and logs."""

    def __init__(self, binary: Path, core: int, ports: Sequence[int]) -> None:
        self.binary = binary
        self.core = core
        self.ports = list(ports)
        self.dir = Path(tempfile.mkdtemp(prefix="hairline-bench-nginx-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, i: int = 0) -> str:
        return f"http://127.0.0.1:{self.ports[i]}/index.html"

    def _config(self) -> str:
        root = self.dir / "www"
        servers = "\n".join(
            f"    server {{ listen 127.0.0.1:{p} backlog=4096; root {root}; }}" for p in self.ports
        )
        temp = self.dir / "tmp"
        return f"""
daemon off;
master_process off;
worker_processes 1;
pid {self.dir}/nginx.pid;
error_log {self.dir}/error.log warn;
events {{ worker_connections 8192; multi_accept on; }}
http {{
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 120s;
    client_body_temp_path {temp}/body;
    proxy_temp_path {temp}/proxy;
    fastcgi_temp_path {temp}/fastcgi;
    uwsgi_temp_path {temp}/uwsgi;
    scgi_temp_path {temp}/scgi;
    default_type text/plain;
{servers}
}}
"""

    def __enter__(self) -> Nginx:
        (self.dir / "www").mkdir()
        (self.dir / "tmp").mkdir()
        (self.dir / "www" / "index.html").write_bytes(STATIC_BODY)
        conf = self.dir / "nginx.conf"
        conf.write_text(self._config())
        command = [str(self.binary), "-p", str(self.dir), "-e", str(self.dir / "error.log")]
        self.proc = subprocess.Popen(pinned(self.core, [*command, "-c", str(conf)]))
        deadline = time.monotonic() + 10
        for port in self.ports:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"nginx exited: {self.error_log()}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=1):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"nginx did not answer on port {port}: {self.error_log()}"
                        ) from None
                    time.sleep(0.05)
        return self

    def error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text()[-2000:] if path.exists() else "(no error log)"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
                self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


# --------------------------------------------------------------------------- peers


def run_wrk(wrk: Path, core: int, url: str, duration_s: float) -> dict[str, Any]:
    command = pinned(
        core, [str(wrk), "-t1", f"-c{CONNECTIONS}", f"-d{max(1, round(duration_s))}s", url]
    )
    out = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 30)
    match = re.search(r"Requests/sec:\s+([\d.]+)", out.stdout)
    if out.returncode != 0 or match is None:
        raise RuntimeError(f"wrk failed: {out.stdout}{out.stderr}")
    errors = re.search(r"Socket errors: (.*)", out.stdout)
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out.stdout)
    return {
        "command": " ".join(command),
        "requests_per_s": float(match[1]),
        "socket_errors": errors[1] if errors else None,
        "non_2xx": int(non_2xx[1]) if non_2xx else 0,
    }


def vegeta_attack(
    vegeta: Path, core: int, url: str, duration_s: float, rate: str, workdir: Path
) -> tuple[list[str], Path]:
    targets = workdir / "targets.txt"
    targets.write_text(f"GET {url}\n")
    results = workdir / f"results-{rate.replace('/', 'per')}.bin"
    attack = [
        str(vegeta),
        "attack",
        f"-rate={rate}",
        f"-duration={duration_s}s",
        f"-targets={targets}",
        f"-output={results}",
    ]
    if rate == "0":
        attack.append(f"-max-workers={CONNECTIONS}")
    command = pinned(core, attack)
    out = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 60)
    if out.returncode != 0:
        raise RuntimeError(f"vegeta attack failed: {out.stderr}")
    return command, results


def run_vegeta_max(
    vegeta: Path, core: int, url: str, duration_s: float, workdir: Path
) -> dict[str, Any]:
    command, results = vegeta_attack(vegeta, core, url, duration_s, "0", workdir)
    report = subprocess.run(
        [str(vegeta), "report", "-type=json", str(results)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    data = json.loads(report.stdout)
    return {
        "command": " ".join(command),
        "requests_per_s": float(data["throughput"]),
        "sent_per_s": float(data["rate"]),
        "success": float(data["success"]),
    }


def run_vegeta_pacing(
    vegeta: Path, core: int, url: str, duration_s: float, workdir: Path
) -> dict[str, Any]:
    """Vegeta's pacing error at a fixed rate, estimated from its result timestamps.

    Vegeta records when each request started, and request `seq` was due at
    t0 + seq / rate; t0 is taken as the least-late request's due time, so the figure is a
    lower bound of the true error.
    """
    rate = f"{int(PACING_RATE_PER_S)}/1s"
    with watch_core(core) as interference:
        command, results = vegeta_attack(vegeta, core, url, duration_s, rate, workdir)
    encoded = subprocess.run(
        [str(vegeta), "encode", "-to=csv", str(results)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = list(csv.reader(io.StringIO(encoded.stdout)))
    # CSV columns: timestamp (ns), code, latency, bytes out, bytes in, error, body,
    # attack, seq, ...
    offsets_ns = sorted(
        int(row[0]) - int(row[8]) * 1e9 / PACING_RATE_PER_S for row in rows if len(row) > 8
    )
    if not offsets_ns:
        raise RuntimeError("vegeta wrote no results")
    t0 = offsets_ns[0]
    errors_us = sorted((o - t0) / 1e3 for o in offsets_ns)
    return {
        "command": " ".join(command),
        "requests": len(errors_us),
        "load_core_steal_ms": interference["steal_ms"],
        "pacing_error_us": {
            "p50": percentile(errors_us, 0.5),
            "p99": percentile(errors_us, 0.99),
            "max": errors_us[-1],
        },
    }


def percentile(sorted_values: Sequence[float], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return float(sorted_values[index])


# --------------------------------------------------------------------------- engine


def run_engine(
    engine: Path,
    targets: dict[str, str],
    *,
    rate_per_s: float,
    duration_s: float,
    core: int | None = None,
    connections: int = CONNECTIONS,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="hairline-bench-") as tmp:
        summary_file = Path(tmp) / "summary.json"
        command = [str(engine), "load"]
        for name, url in targets.items():
            command += ["--target", f"{name}={url.rsplit('/', 1)[0]}"]
        path = "/" + targets[next(iter(targets))].rsplit("/", 1)[1]
        command += [
            "--path",
            path,
            "--rate",
            f"{rate_per_s:g}",
            "--duration",
            f"{duration_s:g}",
            "--connections",
            str(connections),
            "--summary",
            str(summary_file),
            *extra,
        ]
        if core is not None:
            command = pinned(core, command)
        with watch_core(core or 0) as interference:
            out = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 60)
        if not summary_file.exists():
            raise RuntimeError(
                f"`{' '.join(command)}` wrote no summary (exit {out.returncode}): {out.stderr}"
            )
        summary: dict[str, Any] = json.loads(summary_file.read_text())
        summary["_command"] = " ".join(command)
        summary["_steal_ms"] = interference["steal_ms"]
        return summary


def per_target(summary: dict[str, Any], name: str) -> dict[str, Any]:
    targets = summary.get("targets", {})
    if isinstance(targets, list):
        for entry in targets:
            if entry.get("name") == name:
                return dict(entry)
        raise KeyError(f"target {name} not in summary")
    return dict(targets[name])


def sustained(summary: dict[str, Any], rate_per_s: float) -> tuple[bool, str]:
    """The gates of 'sustained': < 1% late sends, no drops, no errors, rate within 1%."""
    target = per_target(summary, "a")
    scheduled = max(1, int(summary.get("scheduled", target.get("requests", 1))))
    late_share = summary.get("late_sends", 0) / scheduled
    achieved = float(target.get("achieved_rate_per_s", 0.0))
    problems = []
    if late_share >= LATE_SHARE_GATE:
        problems.append(f"late {late_share:.2%}")
    if summary.get("dropped", 0):
        problems.append(f"dropped {summary['dropped']}")
    if target.get("errors", 0):
        problems.append(f"errors {target['errors']}")
    if abs(achieved / rate_per_s - 1) > RATE_TOLERANCE:
        problems.append(f"achieved {achieved:.0f}/s")
    return not problems, ", ".join(problems) or "ok"


def search_max_rate(
    engine: Path, core: int, url: str, step_s: float, start_rate: float
) -> dict[str, Any]:
    """Doubles the rate until a gate fails, then bisects to within 5%."""
    steps: list[dict[str, Any]] = []

    def attempt(rate: float) -> bool:
        time.sleep(SETTLE_S)
        summary = run_engine(engine, {"a": url}, rate_per_s=rate, duration_s=step_s, core=core)
        ok, why = sustained(summary, rate)
        log(f"engine at {rate:,.0f}/s: {why}")
        steps.append(
            {
                "rate_per_s": rate,
                "sustained": ok,
                "why": why,
                "load_core_steal_ms": summary["_steal_ms"],
            }
        )
        return ok

    low, high = 0.0, start_rate
    while attempt(high):
        low, high = high, high * 2
        if high > 2_000_000:
            break
    while low == 0.0 or (high - low) / low > 0.05:
        middle = (low + high) / 2
        if low == 0.0 and middle < 100:
            break
        if attempt(middle):
            low = middle
        else:
            high = middle
    return {"max_sustained_rate_per_s": low, "steps": steps}


def repeated(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Several runs of one measurement: the median and worst p99, and every run."""
    p99s = sorted(float(r[key]["p99"]) for r in runs if r.get(key, {}).get("p99") is not None)
    return {
        key: {
            "p99": percentile(p99s, 0.5) if p99s else None,
            "p99_worst": p99s[-1] if p99s else None,
        },
        "runs": runs,
    }


def quantiles(summary: dict[str, Any], *keys: str) -> dict[str, Any]:
    node: Any = summary
    for key in keys:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return dict(node) if isinstance(node, dict) else {}


def pacing_of(summary: dict[str, Any]) -> dict[str, Any]:
    for key in ("pacing_error_us", "send_error_us", "pacing_us", "lateness_us"):
        if key in summary:
            return quantiles(summary, key)
    return {}


def coordinated_omission(engine: Path, core: int, nginx: Nginx) -> dict[str, Any]:
    def stall() -> None:
        time.sleep(CO_STALL_AT_S)
        os.kill(nginx.pid, signal.SIGSTOP)
        time.sleep(CO_STALL_S)
        os.kill(nginx.pid, signal.SIGCONT)

    stopper = threading.Thread(target=stall, daemon=True)
    stopper.start()
    try:
        summary = run_engine(
            engine,
            {"a": nginx.url(0)},
            rate_per_s=CO_RATE_PER_S,
            duration_s=CO_DURATION_S,
            core=core,
            connections=CO_CONNECTIONS,
        )
    finally:
        stopper.join()
        with contextlib.suppress(ProcessLookupError):
            os.kill(nginx.pid, signal.SIGCONT)
    target = per_target(summary, "a")
    return {
        "command": summary["_command"],
        "corrected_us": target.get("latency_us", {}),
        "uncorrected_us": target.get("uncorrected_latency_us", {}),
        "late_sends": summary.get("late_sends"),
        "dropped": summary.get("dropped"),
        "load_core_steal_ms": summary["_steal_ms"],
    }


# --------------------------------------------------------------------------- report


def fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "—"
    if isinstance(value, float | int):
        if abs(value) >= 100:
            return f"{value:,.0f}{unit}"
        return f"{value:.1f}{unit}" if abs(value) >= 10 else f"{value:.2f}{unit}"
    return str(value)


def ratio(ours: Any, theirs: Any) -> str:
    if not isinstance(ours, float | int) or not isinstance(theirs, float | int) or not theirs:
        return "—"
    return f"{ours / theirs:.3g}x"


def table(results: dict[str, Any]) -> str:
    eng = results.get("engine", {})
    wrk = results.get("wrk", {})
    veg = results.get("vegeta", {})
    max_rate = eng.get("max_rate", {}).get("max_sustained_rate_per_s")
    wrk_rate = wrk.get("requests_per_s")
    veg_rate = veg.get("max", {}).get("requests_per_s")
    pacing = eng.get("pacing", {}).get("pacing_error_us", {})
    veg_pacing = veg.get("pacing", {}).get("pacing_error_us", {})
    skew = eng.get("lockstep", {}).get("dispatch_skew_us", {})
    co = eng.get("coordinated_omission", {})
    corrected = co.get("corrected_us", {}).get("p999")
    uncorrected = co.get("uncorrected_us", {}).get("p999")
    rows = [
        "| measure | hairline-engine | wrk | vegeta | engine / wrk | engine / vegeta | goal |",
        "|---|---|---|---|---|---|---|",
        f"| max sustained rate (req/s, one core) | {fmt(max_rate)} | {fmt(wrk_rate)} "
        f"(closed loop) | {fmt(veg_rate)} (-rate=0) | {ratio(max_rate, wrk_rate)} "
        f"| {ratio(max_rate, veg_rate)} | ≥ wrk |",
        f"| pacing error p99 at 5,000/s (µs; median of {REPEATS} runs, worst) "
        f"| {fmt(pacing.get('p99'))} ({fmt(pacing.get('p99_worst'))}) | — "
        f"| {fmt(veg_pacing.get('p99'))} ({fmt(veg_pacing.get('p99_worst'))}), estimated | — "
        f"| {ratio(pacing.get('p99'), veg_pacing.get('p99'))} | ≤ 100 |",
        f"| lockstep skew p99, two targets (µs; median of {REPEATS} runs, worst) "
        f"| {fmt(skew.get('p99'))} ({fmt(skew.get('p99_worst'))}) | — | — | — | — | ≤ 50 |",
        f"| 500 ms stall at 2,000/s: corrected p99.9 (ms) | "
        f"{fmt(corrected / 1e3 if corrected is not None else None)} | — | — | — | — | ≥ 400 |",
        f"| same run: uncorrected p99.9 (ms) | "
        f"{fmt(uncorrected / 1e3 if uncorrected is not None else None)} | — | — | — | — "
        f"| < 400 |",
    ]
    return "\n".join(rows)


def steal_ms(core: int) -> float:
    """Time the hypervisor ran something else while this CPU wanted to run, in ms."""
    for line in Path("/proc/stat").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == f"cpu{core}":
            # user nice system idle iowait irq softirq steal ...
            return int(fields[8]) * TICK_MS if len(fields) > 8 else 0.0
    return 0.0


@contextlib.contextmanager
def watch_core(core: int) -> Iterator[dict[str, float]]:
    """Records the steal time of `core` while a tool runs on it (10 ms resolution).

    Steal is time the hypervisor gave this virtual CPU to someone else; it explains some
    late sends, though on this VM not all pauses are accounted as steal.
    """
    seen: dict[str, float] = {}
    before = steal_ms(core)
    yield seen
    seen["steal_ms"] = steal_ms(core) - before


def busy_cores(window_s: float = 1.0) -> float:
    """CPU in use on the whole machine over a short window, in cores (others' load)."""

    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    total_0, idle_0 = sample()
    time.sleep(window_s)
    total_1, idle_1 = sample()
    total = max(1, total_1 - total_0)
    return (1 - (idle_1 - idle_0) / total) * (os.cpu_count() or 1)


def machine_facts() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu_model": model,
        "cpus": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "loadavg_before": os.getloadavg(),
        "busy_cores_before": round(busy_cores(), 2),
        "steal_ms_total_before": sum(steal_ms(c) for c in os.sched_getaffinity(0)),
    }


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="hairline-bench-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short steps (harness check)")
    parser.add_argument("--no-install", action="store_true", help="never install tools")
    parser.add_argument("--out", type=Path, default=OUT_FILE, help="JSON results file")
    parser.add_argument(
        "--peers-only", action="store_true", help="run wrk and vegeta, skip the engine"
    )
    args = parser.parse_args(argv)
    step_s = 2.0 if args.quick else 4.0

    tools = ensure_tools(install=not args.no_install)
    if tools.nginx is None:
        log("nginx is required: " + "; ".join(tools.notes))
        return 2
    load_core, server_core, core_note = cpu_plan()
    facts = machine_facts()
    results: dict[str, Any] = {
        "machine": facts,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "cores": {"load": load_core, "nginx": server_core, "note": core_note},
        "versions": {
            "nginx": tool_version([str(tools.nginx), "-v"]),
            "wrk": tool_version([str(tools.wrk), "-v"]) if tools.wrk else None,
            "vegeta": vegeta_version(tools.vegeta) if tools.vegeta else None,
            "engine": tool_version([str(tools.engine), "--version"]) if tools.engine else None,
        },
        "notes": list(tools.notes),
    }
    if facts["busy_cores_before"] > 0.1:
        results["notes"].append(
            f"the machine was shared during the run ({facts['busy_cores_before']:.2f} cores "
            f"busy with other work just before it); figures are disturbed"
        )

    with Nginx(tools.nginx, server_core, [free_port(), free_port()]) as nginx, workdir() as tmp:
        url = nginx.url(0)
        if tools.wrk:
            log("wrk: closed loop, max rate")
            results["wrk"] = run_wrk(tools.wrk, load_core, url, step_s * 2)
        if tools.vegeta:
            time.sleep(SETTLE_S)
            vegeta_runs = []
            for i in range(REPEATS):
                log(f"vegeta: pacing at 5,000/s ({i + 1} of {REPEATS})")
                vegeta_runs.append(run_vegeta_pacing(tools.vegeta, load_core, url, step_s * 2, tmp))
                time.sleep(SETTLE_S)
            results["vegeta"] = {"pacing": repeated(vegeta_runs, "pacing_error_us")}
            time.sleep(SETTLE_S)
            log("vegeta: -rate=0, max rate")
            results["vegeta"]["max"] = run_vegeta_max(tools.vegeta, load_core, url, step_s * 2, tmp)
        engine = tools.engine
        if args.peers_only:
            results["notes"].append("engine skipped (--peers-only)")
        elif engine is None or not engine_load_works(engine, url):
            results["notes"].append("hairline-engine load not available: engine figures missing")
        else:
            start_rate = float(results.get("wrk", {}).get("requests_per_s", 20_000)) / 2
            time.sleep(SETTLE_S)
            log("engine: max sustained open-loop rate")
            results["engine"] = {
                "max_rate": search_max_rate(engine, load_core, url, step_s, round(start_rate, -3))
            }
            time.sleep(SETTLE_S)
            pacing_runs = []
            for i in range(REPEATS):
                time.sleep(SETTLE_S)
                log(f"engine: pacing at 5,000/s ({i + 1} of {REPEATS})")
                pacing = run_engine(
                    engine,
                    {"a": url},
                    rate_per_s=PACING_RATE_PER_S,
                    duration_s=step_s * 2,
                    core=load_core,
                )
                pacing_runs.append(
                    {
                        "command": pacing["_command"],
                        "pacing_error_us": pacing_of(pacing),
                        "late_sends": pacing.get("late_sends"),
                        "valid": pacing.get("valid"),
                        "load_core_steal_ms": pacing["_steal_ms"],
                    }
                )
            results["engine"]["pacing"] = repeated(pacing_runs, "pacing_error_us")
            lockstep_runs = []
            for i in range(REPEATS):
                time.sleep(SETTLE_S)
                log(f"engine: lockstep to two targets at 5,000/s ({i + 1} of {REPEATS})")
                lockstep = run_engine(
                    engine,
                    {"a": nginx.url(0), "b": nginx.url(1)},
                    rate_per_s=PACING_RATE_PER_S,
                    duration_s=step_s * 2,
                    core=load_core,
                )
                lockstep_runs.append(
                    {
                        "command": lockstep["_command"],
                        "dispatch_skew_us": quantiles(lockstep, "dispatch_skew_us"),
                        "late_sends": lockstep.get("late_sends"),
                        "valid": lockstep.get("valid"),
                        "load_core_steal_ms": lockstep["_steal_ms"],
                    }
                )
            results["engine"]["lockstep"] = repeated(lockstep_runs, "dispatch_skew_us")
            time.sleep(SETTLE_S)
            log("engine: coordinated omission (500 ms SIGSTOP of nginx)")
            results["engine"]["coordinated_omission"] = coordinated_omission(
                engine, load_core, nginx
            )

    results["machine"]["loadavg_after"] = os.getloadavg()
    results["machine"]["busy_cores_after"] = round(busy_cores(), 2)
    results["machine"]["steal_ms_during_run"] = (
        sum(steal_ms(c) for c in os.sched_getaffinity(0)) - facts["steal_ms_total_before"]
    )
    busy_after = results["machine"]["busy_cores_after"]
    if busy_after > 0.1 and facts["busy_cores_before"] <= 0.1:
        results["notes"].append(
            f"the machine was shared during the run ({busy_after:.2f} cores busy with other "
            "work just after it); figures may be disturbed"
        )
    steal_during = results["machine"]["steal_ms_during_run"]
    if steal_during > 50:
        results["notes"].append(
            f"the hypervisor ran other work on this VM's CPUs for {steal_during:,.0f} ms "
            "during the run (steal time); pauses of the pinned tool show as late sends"
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
