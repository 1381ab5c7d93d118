#!/usr/bin/env python3
"""The API fuzzed: every endpoint of the OpenAPI document, property-based, against a real
``hairline serve`` on loopback, by schemathesis (from PyPI, run by uv in an environment of
its own, so its pytest plugin never meets the test suite).

    python bench/web/fuzz.py                       # 100 cases an operation, seed 1
    python bench/web/fuzz.py --quick               # 10 cases an operation
    python bench/web/fuzz.py --examples 500 --seed 7 --json bench/out/fuzz.json

A fresh lab (SQLite in a temporary folder), an admin token of team demo, a server with the
rate limit lifted (the fuzzer sends thousands of requests a minute) and no scheduler; then
``schemathesis run`` of ``/api/v1/openapi.json`` with the admin's bearer token, every
phase, every check. Its HAR report gives each response: the table counts them by status,
and the ones that break the API's own promises: any 5xx, and any 4xx whose JSON body has
no ``error`` field naming what was wrong. Schemathesis' other findings (a response its
schema does not describe, say) are printed as it reports them.

Writes bench/out/fuzz.json; exits 1 on any 5xx or 4xx without an error.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "bench" / "out" / "fuzz.json"
HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
SCHEMATHESIS = "schemathesis>=4,<5"


def start_server(home: Path, db_url: str, port: int) -> subprocess.Popen[bytes]:
    log = (home / "serve.log").open("wb")
    proc = subprocess.Popen(
        [*HAIRLINE, "serve", "--db", db_url, "--home", str(home), "--host", "127.0.0.1",
         "--port", str(port), "--no-schedule", "--rate-per-s", "100000", "--burst", "100000"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"hairline serve did not start; see {home / 'serve.log'}")


def tally(har: Path) -> dict[str, Any]:
    """Responses by status, and the ones that break a promise (5xx; 4xx without error)."""
    entries = json.loads(har.read_text())["log"]["entries"]
    statuses: collections.Counter[int] = collections.Counter()
    broken: list[dict[str, Any]] = []
    for entry in entries:
        status = int(entry["response"]["status"])
        statuses[status] += 1
        text = entry["response"].get("content", {}).get("text") or ""
        request = f"{entry['request']['method']} {entry['request']['url']}"
        if status >= 500:
            broken.append({"request": request, "status": status, "body": text[:300]})
        elif status >= 400:
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            if not (isinstance(body, dict) and body.get("error")):
                broken.append({"request": request, "status": status, "body": text[:300]})
    return {"cases": len(entries), "statuses": dict(sorted(statuses.items())), "broken": broken}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=100, help="cases an operation")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="10 cases an operation")
    parser.add_argument("--json", type=Path, default=OUT)
    args = parser.parse_args()
    from hairline.kit.ports import free_port
    from hairline.store.db import open_store
    from hairline.web.auth import create_token

    uv = Path(sys.executable).with_name("uv")
    with tempfile.TemporaryDirectory(prefix="hairline-fuzz-") as tmp:
        home = Path(tmp)
        db_url = f"sqlite:///{home / 'hairline.db'}"
        store = open_store(db_url, home=home)
        try:
            token = create_token(store, name="fuzz-admin", team="demo", scope="admin")
        finally:
            store.close()
        port = free_port()
        server = start_server(home, db_url, port)
        har = home / "fuzz.har"
        started = time.monotonic()
        try:
            done = subprocess.run(
                [str(uv), "tool", "run", "--from", SCHEMATHESIS, "schemathesis", "run",
                 f"http://127.0.0.1:{port}/api/v1/openapi.json",
                 "--header", f"Authorization: Bearer {token}",
                 "--checks", "all", "--max-examples", str(10 if args.quick else args.examples),
                 "--seed", str(args.seed), "--workers", "1", "--no-color",
                 "--report", "har", "--report-har-path", str(har),
                 "--output-sanitize", "true"],
                capture_output=True, text=True, env={**os.environ}, cwd=home,  # its cache there
            )  # fmt: skip
        finally:
            server.terminate()
            server.wait(timeout=30)
        wall_s = time.monotonic() - started
        print(done.stdout[-4000:])
        if not har.exists():
            print(done.stderr[-2000:], file=sys.stderr)
            raise SystemExit("schemathesis wrote no report; its output is above")
        result = tally(har)
    result |= {"seed": args.seed, "examples": 10 if args.quick else args.examples,
               "wall_s": round(wall_s, 1), "schemathesis_exit": done.returncode}  # fmt: skip
    print(f"{result['cases']} requests in {wall_s:.0f} s; by status:")
    for status, count in result["statuses"].items():
        print(f"  {status}: {count}")
    for item in result["broken"][:20]:
        print(f"  BROKEN {item['status']} {item['request']}: {item['body'][:200]}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if result["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
