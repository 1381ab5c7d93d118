#!/usr/bin/env python3
"""The dashboard and API at 10,000 experiments: p50 and p99 response times of the
experiments page and ``GET /api/v1/experiments``, on SQLite and on PostgreSQL.

    python bench/web/run.py                      # 10,000 experiments, 200 requests a case
    python bench/web/run.py --quick              # 1,000 experiments, 50 requests
    python bench/web/run.py --backends sqlite --experiments 50000

For each database: a fresh one (SQLite in a temporary folder; PostgreSQL a private cluster
started as bench/control does, removed after), seeded by bench/web/seed.py (arms, trials,
verdicts, triage; a realistic mix of phases, teams, services, A/A and A/B), an admin token
and a read token of one team; then a real ``hairline serve`` subprocess on a loopback port
(no scheduler), and each case's requests one after another over one keep-alive connection
after a warm-up. The cases:

- ``page``: ``GET /experiments`` as an admin (the newest 50, every team);
- ``page filtered``: ``GET /experiments?service=S&verdict=fail`` with the team's token;
- ``api first``: ``GET /api/v1/experiments`` as an admin;
- ``api filtered``: ``GET /api/v1/experiments?verdict=fail&kind=ab`` with the team's
  token (the regressions of one team: a few hundred of 10,000);
- ``api deep``: ``GET /api/v1/experiments?before=ID`` as an admin, ID near the oldest.

PostgreSQL's statistics are gathered (ANALYZE) after the bulk load, as autovacuum would
have for a database that grew over months; --no-analyze times it before.

Prints a table, writes bench/out/web.json; exits 1 when a p99 is over 200 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import text

BENCH = Path(__file__).resolve().parents[1]
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from seed import TEAMS, seed  # noqa: E402

from control.run import Postgres  # noqa: E402
from hairline.store.db import open_store  # noqa: E402
from hairline.web.auth import create_token  # noqa: E402

OUT = ROOT / "bench" / "out" / "web.json"
GOAL_P99_MS = 200.0
START_TIMEOUT_S = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``hairline serve`` on a loopback port, stopped with its process group."""

    def __init__(self, db_url: str, home: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        hairline = Path(sys.executable).with_name("hairline")
        self.log = (home / "serve.log").open("wb")
        self.proc = subprocess.Popen(
            [str(hairline), "serve", "--db", db_url, "--home", str(home), "--host",
             "127.0.0.1", "--port", str(self.port), "--no-schedule"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"hairline serve did not start; see {home / 'serve.log'}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


def _time_case(
    client: httpx.Client, path: str, token: str, *, requests: int, warmup: int
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    sizes = []
    for _ in range(warmup):
        client.get(path, headers=headers).raise_for_status()
    times_ms = []
    for _ in range(requests):
        start = time.perf_counter()
        response = client.get(path, headers=headers)
        times_ms.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
        sizes.append(len(response.content))
    t = np.array(times_ms)
    return {
        "path": path, "requests": requests,
        "p50_ms": round(float(np.percentile(t, 50)), 2),
        "p99_ms": round(float(np.percentile(t, 99)), 2),
        "max_ms": round(float(t.max()), 2), "mean_ms": round(float(t.mean()), 2),
        "bytes": int(np.median(sizes)),
    }  # fmt: skip


def _bench_backend(
    name: str,
    db_url: str,
    home: Path,
    *,
    experiments: int,
    requests: int,
    warmup: int,
    analyze: bool = True,
) -> dict[str, Any]:
    store = open_store(db_url, home=home)
    started = time.monotonic()
    try:
        seeded = seed(store, experiments=experiments)
        seed_s = time.monotonic() - started
        if analyze and store.dialect == "postgresql":
            # What autovacuum does to a database that grew over months; right after a bulk
            # load, without statistics, the planner scans trials and verdicts whole.
            with store.autocommit() as connection:
                connection.execute(text("ANALYZE"))
        admin = create_token(store, name="bench-admin", team=TEAMS[0], scope="admin")
        team = TEAMS[3]
        reader = create_token(store, name="bench-reader", team=team, scope="read")
    finally:
        store.close()
    service = next(s for s in seeded.services if s.startswith(team))
    # The deep page: the 50 experiments just above the oldest 100.
    deep = seeded.oldest_id + 150
    cases = {
        "page": ("/experiments", admin),
        "page filtered": (f"/experiments?service={service}&verdict=fail", reader),
        "api first": ("/api/v1/experiments", admin),
        "api filtered": ("/api/v1/experiments?verdict=fail&kind=ab", reader),
        "api deep": (f"/api/v1/experiments?before={deep}", admin),
    }
    print(f"{name}: {seeded.experiments} experiments, {seeded.arms} arms, {seeded.trials} "
          f"trials, {seeded.verdicts} verdicts, {seeded.triage} triaged, seeded in "
          f"{seed_s:.1f} s", flush=True)  # fmt: skip
    server = Server(db_url, home)
    results: dict[str, Any] = {}
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            for case, (path, token) in cases.items():
                results[case] = _time_case(client, path, token, requests=requests, warmup=warmup)
                r = results[case]
                print(f"  {case:<14} p50 {r['p50_ms']:7.2f} ms  p99 {r['p99_ms']:7.2f} ms  "
                      f"max {r['max_ms']:7.2f} ms  {r['bytes']:>7} bytes  {path}",
                      flush=True)  # fmt: skip
    finally:
        server.stop()
    return {"seeded": seeded.__dict__ | {"services": len(seeded.services)},
            "seed_s": round(seed_s, 1), "cases": results}  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--experiments", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--quick", action="store_true", help="1,000 experiments, 50 requests")
    parser.add_argument("--no-analyze", action="store_true",
                        help="PostgreSQL: time it before ANALYZE")  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.experiments, args.requests, args.warmup = 1_000, 50, 5
    report: dict[str, Any] = {
        "experiments": args.experiments, "requests": args.requests, "warmup": args.warmup,
        "goal_p99_ms": GOAL_P99_MS, "cpus": os.cpu_count(),
        "postgresql_analyzed": not args.no_analyze, "backends": {},
    }  # fmt: skip
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory(prefix=f"hairline-bench-web-{backend}-") as tmp:
            home = Path(tmp)
            if backend == "sqlite":
                report["backends"][backend] = _bench_backend(
                    backend, f"sqlite:///{home / 'hairline.db'}", home,
                    experiments=args.experiments, requests=args.requests, warmup=args.warmup,
                )  # fmt: skip
            elif backend == "postgresql":
                pg = Postgres(fsync=False)
                try:
                    report["backends"][backend] = _bench_backend(
                        backend, pg.url, home, experiments=args.experiments,
                        requests=args.requests, warmup=args.warmup,
                        analyze=not args.no_analyze,
                    )  # fmt: skip
                finally:
                    pg.stop()
            else:
                print(f"unknown backend {backend!r}: use sqlite and/or postgresql")
                return 2
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    worst = max(case["p99_ms"] for b in report["backends"].values() for case in b["cases"].values())
    met = worst <= GOAL_P99_MS
    print(f"worst p99 {worst:.1f} ms (goal <= {GOAL_P99_MS:.0f} ms): {'met' if met else 'NOT met'}")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
