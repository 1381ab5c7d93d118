#!/usr/bin/env python3
"""The same experiment on one host pair and on two side by side ([design] host_pairs).

    python bench/hostpairs/run.py                 # 2 rounds of 1 pair, then 2 pairs
    python bench/hostpairs/run.py --rounds 3 --trials 6 --rate 800

Starts a Ray head on 127.0.0.1 and four worker nodes with ``hairline agent start`` (token
auth on, hosts registered in a SQLite database of a temporary folder): 127.0.0.2 and .4 on
CPU 0, .3 and .5 on CPU 1, one class. Each round runs the sample service's experiment
(B with ``--regress-cpu 0.05``, a fixed rate, 1 s batches) with ``host_pairs = 1`` and
then ``= 2``, ``hairline run --backend ray``, and prints the wall time of the run and of
its trials (first trial started to last one done), the verdict on CPU per request with its
interval, the interval with the host pair as the cluster, and the trials per pair.
Everything it started is stopped at the end.

On a 2-CPU machine the four arms of two pairs, two engines and the Ray daemons share the
same two CPUs: the figure is what side by side gains when the pairs are not machines of
their own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sample-service"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
# name: (node IP, host CPUs, housekeeping CPUs); alternating CPUs, so that each pair (by
# host id: w2+w3, w4+w5) has one host on each CPU.
WORKERS = {"w2": ("127.0.0.2", "0", "1"), "w3": ("127.0.0.3", "1", "0"),
           "w4": ("127.0.0.4", "0", "1"), "w5": ("127.0.0.5", "1", "0")}  # fmt: skip


class Lab:
    def __init__(self, root: Path) -> None:
        self.root = root
        token = root / "token"
        token.write_text(os.urandom(32).hex())
        token.chmod(0o600)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.db = f"sqlite:///{root}/lab.db"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token),
                    "HAIRLINE_DB": self.db}  # fmt: skip
        self.env.pop("RAY_AUTH_TOKEN", None)
        self.agents = root / "agents"

    def hairline(self, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*HAIRLINE, *args], capture_output=True, text=True, env=self.env,
                              timeout=timeout_s)  # fmt: skip

    def checked(self, *args: str) -> str:
        done = self.hairline(*args)
        if done.returncode != 0:
            raise SystemExit(f"hairline {' '.join(args)}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def start(self) -> None:
        self.checked("agent", "start", "--head", "--port", str(self.port), "--node-ip",
                     "127.0.0.1", "--housekeeping-cpus", "0", "--home", str(self.agents),
                     "--ray-temp-dir", str(self.root / "head"))  # fmt: skip
        for name, (ip, cpus, housekeeping) in WORKERS.items():
            self.checked("agent", "start", "--address", f"127.0.0.1:{self.port}", "--name",
                         name, "--node-ip", ip, "--cpus", cpus, "--housekeeping-cpus",
                         housekeeping, "--region", "lab", "--server-type", "bench-vm",
                         "--home", str(self.agents),
                         "--ray-temp-dir", str(self.root / name))  # fmt: skip

    def stop(self) -> None:
        for name in WORKERS:
            self.hairline("agent", "stop", "--name", name, "--force", "--home", str(self.agents))
        self.hairline("agent", "stop", "--head", "--force", "--home", str(self.agents))


def experiment(folder: Path, *, pairs: int, trials: int, rate: float) -> Path:
    """The example's file at a fixed rate, 1 s batches, ``trials`` trials on ``pairs``."""
    folder.mkdir(parents=True, exist_ok=True)
    for item in ("service.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / item, folder / item)
    text = (EXAMPLE / "experiment.toml").read_text()
    for old, new in (
        ("target_utilization = 0.6", f"rate_per_s = {rate:g}"),
        ("duration_s = 4", "duration_s = 1"),
        ("warmup_duration_s = 1.5", "warmup_duration_s = 0.5"),
        ("trials = 7", f"trials = {trials}\nhost_pairs = {pairs}"),
    ):
        if old not in text:
            raise SystemExit(f"{EXAMPLE / 'experiment.toml'} no longer has {old!r}")
        text = text.replace(old, new)
    path = folder / f"pairs-{pairs}.toml"
    path.write_text(text)
    return path


def trial_span_s(db: str, experiment_id: int) -> float:
    """First trial started to last trial done, from the lab's database."""
    from sqlalchemy import func, select

    from hairline.store.db import open_store
    from hairline.store.models import Trial

    store = open_store(db)
    try:
        with store.transaction() as session:
            first, last = session.execute(
                select(func.min(Trial.started_at), func.max(Trial.finished_at)).where(
                    Trial.experiment_id == experiment_id, Trial.state == "done"
                )
            ).one()
    finally:
        store.close()
    return float(last - first)


def one_run(lab: Lab, path: Path, home: Path) -> dict[str, Any]:
    out = home / "report.json"
    started = time.monotonic()
    done = lab.hairline("run", str(path), "--backend", "ray", "--ray-address",
                        f"127.0.0.1:{lab.port}", "--home", str(home),
                        "--json", str(out))  # fmt: skip
    wall_s = time.monotonic() - started
    if not out.exists():
        raise SystemExit(f"no report from {path}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    report = json.loads(out.read_text())
    cpu = next(m for m in report["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    per_arm = report["per_trial"]["cpu_ns_per_request"]["arms"]
    base = {v["trial"]: v["value"] for v in per_arm["A"]}
    per_trial = [v["value"] / base[v["trial"]] - 1 for v in per_arm["B"] if v["trial"] in base]
    return {
        "host_pairs": len(report["host_pairs"]) or 1,
        "trials": report["trials_done"],
        "wall_s": wall_s,
        "trials_s": trial_span_s(lab.db, report["experiment_id"]),
        "verdict": cpu["verdict"],
        "effect_rel": cpu["effect_rel"],
        "ci_rel": cpu["ci_rel"],
        "by_host_pair": cpu["by_host_pair"],
        "per_pair": [(p["hosts"], p["trials"]) for p in report["host_pairs"]],
        # Each trial's B against A (relative): where the interval's width comes from.
        "per_trial": per_trial,
        "exit": done.returncode,
    }


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:+.2f}%"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--rate", type=float, default=800.0)
    parser.add_argument("--json", type=Path, help="Also write every run as JSON here.")
    args = parser.parse_args()
    lab = Lab(Path(tempfile.mkdtemp(prefix="hlpairs-", dir="/tmp")))
    results: list[dict[str, Any]] = []
    try:
        lab.start()
        for n in range(args.rounds):
            for pairs in (1, 2):
                folder = lab.root / f"r{n}-p{pairs}"
                path = experiment(folder, pairs=pairs, trials=args.trials, rate=args.rate)
                r = one_run(lab, path, folder / "home")
                results.append(r)
                lo, hi = r["ci_rel"]
                clustered = r["by_host_pair"]
                extra = (
                    f"; by host pair {_pct(clustered['effect_rel'])} "
                    f"[{_pct(clustered['ci_rel'][0])}, {_pct(clustered['ci_rel'][1])}]; "
                    f"per pair {r['per_pair']}"
                    if clustered
                    else ""
                )
                print(f"round {n + 1}, {pairs} pair{'s' if pairs > 1 else ''}: "
                      f"{r['trials']} trials in {r['trials_s']:.1f} s (run {r['wall_s']:.1f} s); "
                      f"{r['verdict']} {_pct(r['effect_rel'])} [{_pct(lo)}, {_pct(hi)}]{extra}; "
                      f"per trial {' '.join(_pct(x) for x in r['per_trial'])}",
                      flush=True)  # fmt: skip
    finally:
        lab.stop()
        subprocess.run(["rm", "-rf", str(lab.root)], check=False)
    for pairs in (1, 2):
        mine = [r for r in results if r["host_pairs"] == pairs]
        if mine:
            print(f"{pairs} pair(s): trials {[round(r['trials_s'], 1) for r in mine]} s, "
                  f"runs {[round(r['wall_s'], 1) for r in mine]} s")  # fmt: skip
    ones = [r["trials_s"] for r in results if r["host_pairs"] == 1]
    twos = [r["trials_s"] for r in results if r["host_pairs"] == 2]
    if ones and twos:
        print(f"two pairs took {sum(twos) / sum(ones):.0%} of one pair's time for the trials")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
