"""Helpers of the web tests (the fixtures are in conftest.py): the served lab's handle,
HTTP requests by the standard library, and the sample service's submission files.

    body = submission(experiment_toml(b_args='args = ["--regress-cpu", "0.10"]'))
    status, answer, _ = web_lab.request("POST", "/api/v1/experiments", token="demo-submit",
                                        body=body)
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hairline.kit.ports import free_port
from hairline.kit.procs import stop_process
from schema_check import check_api

HAIRLINE = [sys.executable, "-c", "from hairline.cli import main; main()"]
EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
SERVICE = "sample-web"
# {host}: the arms listen where the lab says; the warm-up is short so that a batch's
# one-second warm-up sees a warm service.
START = "{engine} sample-service --host {host} --port {port} --warmup-s 0.2"
START_TIMEOUT_S = 30.0
# Both experiments, one after the other on one processor, with room for a slow CI machine.
RUNS_TIMEOUT_S = 420.0
TRACE = (EXAMPLE / "trace.jsonl").read_text()


@dataclass(frozen=True)
class WebLab:
    """A served lab: its base URL, home folder, database URL and tokens by name."""

    url: str
    home: Path
    db_url: str
    tokens: dict[str, str]

    def request(
        self, method: str, path: str, *, token: str | None = None, body: Any = None
    ) -> tuple[int, Any, Mapping[str, str]]:
        """(status, JSON body or text, headers) of one request; ``token`` is a name in
        ``tokens`` (or None for no Authorization header)."""
        return http(method, self.url + path, token=self.tokens[token] if token else None,
                    body=body)  # fmt: skip


def http(
    method: str, url: str, *, token: str | None = None, body: Any = None, timeout_s: float = 30
) -> tuple[int, Any, Mapping[str, str]]:
    """One HTTP request by the standard library (what a CI script would use); a JSON answer
    of the API is checked against docs/schema/api.json (tests/schema_check.py)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as resp:
            status, raw, got = resp.status, resp.read(), resp.headers
    except urllib.error.HTTPError as err:
        status, raw, got = err.code, err.read(), err.headers
    text = raw.decode()
    kind = got.get("content-type", "")
    answer = json.loads(text) if "json" in kind and text else text
    path = urllib.parse.urlsplit(url).path
    if path.startswith("/api/v1/") and "json" in kind and not path.endswith("openapi.json"):
        check_api(method, path, status, answer)  # every JSON answer against its schema
    return status, answer, got


def service_toml(start: str = START, *, name: str = SERVICE, extra: str = "") -> str:
    return (
        f'[service]\nname = "{name}"\nstart = {json.dumps(start)}\n'
        'health = "/healthz"\nhealth_timeout_s = 10\nwarm = "/warm"\n'
        f'metrics_path = "/metrics"\n{extra}\n'
        "[service.metrics]\n"
        'cpu_ns_per_request = { threshold = "2%" }\n'
        'anon_memory_bytes = { threshold = "5%" }\n'
    )


def experiment_toml(
    *,
    team: str = "demo",
    b_args: str = "",
    trials: int = 4,
    alpha: float = 0.05,
    duet: bool = False,
) -> str:
    """A short sample-service experiment: 1,500 requests/s for 1 s after a 0.5 s warm-up
    (pages and gates are tested with it, not power). ``duet``: both arms on one CPU and
    the engine on the other, one batch a trial (docs/hosts.md): half the batches."""
    design = f"[design]\ntrials = {trials}\n"
    if duet:
        design += 'name = "request-balanced"\n\n[hosts]\nlocal_layout = "duet"\n'
    return (
        'service = "service.toml"\ntrace = "trace.jsonl"\n'
        f'team = "{team}"\n\n[arms.A]\n\n[arms.B]\n{b_args}\n\n'
        "[load]\nrate_per_s = 1500\nwarmup_rate_per_s = 1500\nduration_s = 1\n"
        "warmup_duration_s = 0.5\n\n"
        f"{design}\n[analysis]\nalpha = {alpha}\n"
    )


def submission(experiment: str, *, kind: str = "ab", service: str | None = None,
               **files: str) -> dict[str, Any]:  # fmt: skip
    """A POST /api/v1/experiments body with the sample trace and service file."""
    return {
        "experiment": experiment,
        "kind": kind,
        "files": {
            "service.toml": service if service is not None else service_toml(),
            "trace.jsonl": TRACE,
            **files,
        },
    }


def stop(proc: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    stop_process(proc, grace_s=timeout_s, close_stdout=False)


def wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        try:
            if http("GET", url + "/healthz", timeout_s=1)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    stop(proc)
    pytest.fail(f"hairline serve did not answer /healthz:\n{log.read_text()}", pytrace=False)


@contextlib.contextmanager
def served(db_url: str, home: Path, log: Path, tokens: Mapping[str, str]) -> Iterator[WebLab]:
    """`hairline serve --no-schedule` on ``db_url`` and a free loopback port, its output in
    ``log``, healthy before the block and stopped after it."""
    port = free_port()
    with log.open("wb") as out:
        server = subprocess.Popen(
            [*HAIRLINE, "serve", "--db", db_url, "--home", str(home), "--port", str(port),
             "--no-schedule"], stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        lab = WebLab(url=f"http://127.0.0.1:{port}", home=home, db_url=db_url, tokens=tokens)
        wait_healthy(lab.url, server, log)
        yield lab
    finally:
        stop(server)


def wait_ended(lab: WebLab, experiment_id: int, *, timeout_s: float = RUNS_TIMEOUT_S) -> str:
    """Poll the gate until the experiment has ended; its answer."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, body, _ = lab.request(
            "GET", f"/api/v1/experiments/{experiment_id}/gate", token="demo-read"
        )
        assert status == 200, body
        if body["answer"] != "pending":
            return str(body["answer"])
        time.sleep(1.0)
    logs = (lab.home / "lab.log").read_text()
    pytest.fail(f"experiment {experiment_id} still pending after {timeout_s:.0f} s:\n{logs}",
                pytrace=False)  # fmt: skip
