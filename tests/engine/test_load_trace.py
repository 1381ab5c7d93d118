"""Trace replay: what each target receives, and the three pacing modes.

A small recording HTTP/1.1 server on loopback stands in for a service here, because these
tests need to see the bytes that arrived (headers, bodies, timing of keyed requests).
"""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from hairline.engine import LoadPlan, read_requests, run_load


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    start_s: float
    end_s: float


@dataclass
class Recorder:
    url: str
    seen: list[Seen] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture(autouse=True)
def _engine_env(engine_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAIRLINE_ENGINE", str(engine_path))


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A keep-alive HTTP/1.1 server that records every request; /slow takes 30 ms."""
    rec = Recorder(url="")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            start = time.monotonic()
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            if self.path.startswith("/slow"):
                time.sleep(0.03)
            payload = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            with rec.lock:
                rec.seen.append(
                    Seen(
                        self.command,
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        body,
                        start,
                        time.monotonic(),
                    )
                )

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec
    server.shutdown()
    server.server_close()


def write_trace(path: Path, requests: list[dict[str, object]]) -> Path:
    lines = [json.dumps({"hairline_trace": 1, "source": "test"})]
    lines += [json.dumps(r) for r in requests]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_trace_requests_arrive_as_recorded_with_per_target_rewrites(recorder, tmp_path):
    trace = write_trace(
        tmp_path / "t.jsonl",
        [
            {
                "method": "POST",
                "path": "/api/search?q=shoes",
                "headers": [["x-user", "7"], ["host", "prod.example"]],
                "body_b64": base64.b64encode(b'{"q": "shoes"}').decode(),
                "endpoint": "search",
            },
            {"path": "/api/feed?user=3", "headers": {"accept": "text/plain"}},
        ],
    )
    plan = LoadPlan(
        targets=(("a", recorder.url), ("b", recorder.url + "/prefix")),
        trace=trace,
        rate_per_s=100,
        duration_s=0.2,
        set_headers=(("b", "x-shard", "3"), ("b", "x-user", "8")),
        hosts=(("b", "canary.example"),),
    )

    result = run_load(plan)

    assert result.targets["a"].endpoints.keys() == {"search", "/api/feed"}
    seen = sorted(recorder.seen, key=lambda s: (s.path, s.headers["x-hairline-request-id"]))
    posts_a = [s for s in seen if s.path == "/api/search?q=shoes"]
    posts_b = [s for s in seen if s.path == "/prefix/api/search?q=shoes"]
    assert posts_a and posts_b
    a, b = posts_a[0], posts_b[0]
    assert a.method == b.method == "POST"
    assert a.body == b.body == b'{"q": "shoes"}'
    assert a.headers["x-user"] == "7" and a.headers["host"] == recorder.url[len("http://") :]
    assert "x-shard" not in a.headers
    assert b.headers["x-user"] == "8" and b.headers["x-shard"] == "3"
    assert b.headers["host"] == "canary.example"
    feeds = [s for s in seen if s.path.endswith("/api/feed?user=3")]
    assert all(s.headers["accept"] == "text/plain" for s in feeds)
    # Request i carries its id on every target.
    ids_a = sorted(int(s.headers["x-hairline-request-id"]) for s in seen if "prefix" not in s.path)
    assert ids_a == list(range(result.scheduled))


def test_recorded_pace_replays_scaled_and_clamped_gaps(recorder, tmp_path):
    """False failure: none: intended send times are the schedule's, not measurements."""
    # Gaps of 100 ms and 10 s: at speed 2 they become 50 ms and (clamped) 100 ms.
    trace = write_trace(
        tmp_path / "t.jsonl",
        [
            {"path": "/a", "ts_us": 1_000_000},
            {"path": "/b", "ts_us": 1_100_000},
            {"path": "/c", "ts_us": 11_100_000},
        ],
    )
    plan = LoadPlan(
        targets=(("a", recorder.url),),
        trace=trace,
        pace="recorded",
        speed=2,
        max_gap_ms=100,
        duration_s=0.5,
        requests_path=tmp_path / "r.bin",
    )

    run_load(plan)

    records = read_requests(tmp_path / "r.bin")
    intended_ms = np.sort(records["intended_ns"]) / 1e6
    # One pass is 0, 50, 150 ms, then the mean gap (75 ms) before it starts again.
    assert intended_ms.tolist() == [0, 50, 150, 225, 275, 375, 450]


def test_ordered_pace_never_overlaps_requests_with_the_same_key(recorder, tmp_path):
    """False failure: about 1e-3 (not measured). At least 4 of each user's requests in 0.3 s needs 4
    chains of 30 ms; the overlap check's slack is 1 ms, less than Python's 5 ms thread switch
    interval, so a handler thread held off the GIL between writing its answer and reading the clock
    could read as an overlap (whether the engine reuses one connection per key, which would rule it
    out, is not checked here)."""
    trace = write_trace(
        tmp_path / "t.jsonl",
        [{"path": f"/slow?user={i % 2}&step={i}", "key": f"user-{i % 2}"} for i in range(6)],
    )
    plan = LoadPlan(
        targets=(("a", recorder.url),),
        trace=trace,
        pace="ordered",
        # A request every 5 ms, each taking 30 ms: without ordering they would overlap.
        rate_per_s=200,
        duration_s=0.3,
    )

    result = run_load(plan)

    assert result.targets["a"].errors == 0
    for user in ("0", "1"):
        mine = sorted(
            (s for s in recorder.seen if f"user={user}&" in s.path),
            key=lambda s: int(s.headers["x-hairline-request-id"]),
        )
        assert len(mine) >= 4
        for earlier, later in itertools.pairwise(mine):
            assert later.start_s >= earlier.end_s - 0.001


def test_set_header_refuses_the_headers_the_engine_writes_naming_the_fix(
    recorder, engine_path, tmp_path
):
    trace = write_trace(tmp_path / "t.jsonl", [{"path": "/api/feed?user=3"}])
    command = [str(engine_path), "load", "--target", f"a={recorder.url}", "--trace", str(trace)]
    command += ["--rate", "100", "--duration", "0.2"]
    for header in ("Host", "Content-Length", "transfer-encoding", "Connection"):
        command += ["--set-header", f"a:{header}=x"]
    command += ["--set-header", "a:X-Hairline-Request-Id=1", "--set-header", "a:x-bell=\x07"]

    proc = subprocess.run(command, capture_output=True, text=True, timeout=30)

    assert proc.returncode == 2, proc.stderr
    for expected in (
        "--set-header a:Host=x: the engine sends each target's Host itself; write --host a=x",
        "--set-header a:Content-Length=x: the engine frames each request's body itself",
        "--set-header a:transfer-encoding=x: the engine frames each request's body itself",
        "--set-header a:Connection=x: the engine keeps its connections alive itself",
        "--set-header a:X-Hairline-Request-Id=1: the engine numbers every request itself",
        "the value of x-bell has a control character",
    ):
        assert expected in proc.stderr
    assert recorder.seen == []
