"""`hairline-engine record` and `hairline record`, over real HTTP on loopback.

The recorder sits in front of a real sample service (or a small echo server where a test
needs chunked bodies); mirrors that are down or slow are a closed port and a socket that
never accepts. Every recorder a test starts is stopped at teardown.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any, Protocol

import pytest
from click.testing import CliRunner

from hairline.cli import main
from hairline.cli.record import engine_args
from hairline.trace import labels, shape
from suitekit import StartSampleService

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 5.0
STATS_PATH = "/__hairline/stats"


@dataclass
class Recorder:
    """One running ``hairline-engine record``."""

    proc: subprocess.Popen[str]
    port: int
    out: Path
    _stderr: IO[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, int]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request("GET", STATS_PATH)
            resp = conn.getresponse()
            assert resp.status == 200
            counters: dict[str, int] = json.loads(resp.read())
            return counters
        finally:
            conn.close()

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, dict[str, int]]:
        """Signals the recorder; returns its exit status and the counters it printed."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        counters: dict[str, int] = {}
        for line in reversed(self.stderr_text().splitlines()):
            if line.startswith("{"):
                counters = json.loads(line)
                break
        return self.proc.returncode, counters

    def lines(self) -> list[dict[str, Any]]:
        """The trace's lines, header first; every line must be whole JSON."""
        return [json.loads(line) for line in self.out.read_text().splitlines()]


class StartRecorder(Protocol):
    def __call__(self, upstream: str, *extra: str) -> Recorder: ...


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str | None:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    return proc.stdout.readline().strip() if ready else None


@pytest.fixture
def recorder(engine_path: Path, tmp_path: Path) -> Iterator[StartRecorder]:
    started: list[Recorder] = []

    def start(upstream: str, *extra: str) -> Recorder:
        out = tmp_path / f"trace-{len(started)}.jsonl"
        stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed at teardown)
        command = [str(engine_path), "record", "--listen", "127.0.0.1:0"]
        command += ["--upstream", upstream, "--out", str(out), *extra]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        first = _first_line(proc, START_TIMEOUT_S) or ""
        if not first.startswith("listening on "):
            proc.kill()
            proc.wait()
            stderr.seek(0)
            pytest.fail(f"recorder did not start: {first!r} {stderr.read().decode()}")
        rec = Recorder(proc=proc, port=int(first.rsplit(":", 1)[1]), out=out, _stderr=stderr)
        started.append(rec)
        return rec

    yield start
    for rec in started:
        rec.stop()
        rec._stderr.close()


def closed_port() -> int:
    """A loopback port nothing listens on (it was free a moment ago)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def get_all(
    base_url: str,
    paths: list[str],
    *,
    headers: dict[str, str] | None = None,
    threads: int = 1,
) -> list[tuple[int, bytes, float]]:
    """GETs the paths on keep-alive connections; (status, body, latency_s) in path order."""
    host, port = base_url.removeprefix("http://").split(":")
    results: list[tuple[int, bytes, float]] = [(0, b"", 0.0)] * len(paths)

    def worker(first: int) -> None:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            for i in range(first, len(paths), threads):
                began = time.perf_counter()
                conn.request("GET", paths[i], headers=headers or {})
                resp = conn.getresponse()
                body = resp.read()
                results[i] = (resp.status, body, time.perf_counter() - began)
        finally:
            conn.close()

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return results


def replay_command(engine_path: Path, url: str, trace: Path) -> list[str]:
    """`hairline-engine load` replaying a trace to one target at 200/s."""
    target = f"a={url}"
    return [str(engine_path), "load", "--target", target, "--trace", str(trace), "--rate", "200"]


def wait_for(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


# --------------------------------------------------------------------------- forwarding


def test_requests_pass_unchanged_and_are_recorded_as_a_replayable_trace(
    sample_service: StartSampleService, recorder: StartRecorder, engine_path: Path
) -> None:
    """False failure: none in practice: the timestamps have 60 s of margin, and the replay's 30 s
    timeout is for a 0.3 s run."""
    svc = sample_service()
    rec = recorder(svc.url, "--service", "sample")
    paths = [f"/api/{e}?user={u}" for e in ("feed", "profile", "search") for u in (1, 2, 3)]
    paths += ["/healthz", "/no/such/path"]
    direct = get_all(svc.url, paths)
    proxied = get_all(rec.url, paths)
    assert [(s, b) for s, b, _ in proxied] == [(s, b) for s, b, _ in direct]

    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    conn.request("POST", "/api/search?user=5", body=b'{"q": "shoes"}', headers={"X-Tenant": "7"})
    resp = conn.getresponse()
    assert (resp.status, json.loads(resp.read())["user"]) == (200, 5)
    conn.close()

    code, counters = rec.stop()
    assert code == 0
    assert counters["proxied"] == counters["sampled"] == counters["written"] == len(paths) + 1
    lines = rec.lines()
    header, requests = lines[0], lines[1:]
    assert header["hairline_trace"] == 1 and header["source"] == "record"
    assert header["service"] == "sample" and header["sampling"] == "all"
    assert [r["path"] for r in requests[:-1]] == paths
    post = requests[-1]
    assert post["method"] == "POST" and post["endpoint"] == "/api/search"
    assert post["body_b64"] == "eyJxIjogInNob2VzIn0="
    assert ["X-Tenant", "7"] in post["headers"]
    owned = {"host", "content-length", "connection", "transfer-encoding"}
    assert all(name.lower() not in owned for r in requests for name, _ in r["headers"])
    now_us = time.time() * 1e6
    assert all(now_us - 60e6 < r["ts_us"] <= now_us for r in requests)

    # The engine replays what the recorder wrote.
    replay = subprocess.run(
        [*replay_command(engine_path, svc.url, rec.out), "--duration", "0.3"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert replay.returncode == 0, replay.stderr
    assert json.loads(replay.stdout)["targets"]["a"]["errors"] == 0


def test_labels_keys_and_dropped_headers_are_recorded(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    svc = sample_service()
    rec = recorder(
        svc.url,
        "--label",
        r"^/api/(?P<name>\w+)$=api-${name}",
        "--label",
        "^/health=health",
        "--key-cookie",
        "session",
        "--drop-header",
        "Authorization",
    )
    headers = {"Cookie": "theme=dark; session=u-42", "Authorization": "Bearer secret"}
    get_all(rec.url, ["/api/feed?user=1", "/healthz", "/warm"], headers=headers)
    get_all(rec.url, ["/api/profile?user=2"])
    assert rec.stop()[0] == 0
    requests = rec.lines()[1:]
    assert [r["endpoint"] for r in requests] == ["api-feed", "health", "/warm", "api-profile"]
    assert [r.get("key") for r in requests] == ["u-42", "u-42", "u-42", None]
    assert all(name.lower() != "authorization" for r in requests for name, _ in r["headers"])
    assert rec.lines()[0]["key"] == {"cookie": "session"}


def test_labels_are_the_same_as_the_python_labeller_gives(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    rules = [
        r"^/api/(?P<kind>[a-z]+)$=api-$kind",
        r"^/users/([0-9]+)/posts=${1}-posts",
        r"^/empty/(x)?=$1",
        r"^/q=a=query-eq",
    ]
    paths = [
        "/api/feed?user=1",
        "/users/42/posts?page=2",
        "/users/42",
        "/empty/y",
        "/q=a",
        "/files/123e4567-e89b-12d3-a456-426614174000/v2",
        "/blob/deadbeefdeadbeef01/x",
        "/plain/path",
    ]
    svc = sample_service()
    args = [arg for rule in rules for arg in ("--label", rule)]
    rec = recorder(svc.url, *args, "--normalize-ids")
    get_all(rec.url, paths)
    assert rec.stop()[0] == 0
    recorded = [r["endpoint"] for r in rec.lines()[1:]]
    labeller = labels.Labeller(labels.parse_label_rules(rules), normalize_ids=True)
    assert recorded == [labeller(p) for p in paths]
    assert recorded[:3] == ["api-feed", "42-posts", "/users/:id"]


def test_headers_are_recorded_by_the_rule_the_engine_replays_them_by(
    chunked_echo: str, recorder: StartRecorder, engine_path: Path
) -> None:
    rec = recorder(chunked_echo)
    host, port = rec.url.removeprefix("http://").split(":")
    answers = []
    for raw in (
        b"POST /a HTTP/1.1\r\nHost: x\r\nX_Under: 1\r\nX-Tab: a\tb\r\nContent-Length: 0\r\n\r\n",
        b"POST /b HTTP/1.1\r\nHost: x\r\nX-Bell: a\x07b\r\nContent-Length: 0\r\n\r\n",
    ):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(raw)
            answers.append(sock.recv(64).split(b"\r\n")[0])
    code, counters = rec.stop()

    # A control character in a value is malformed HTTP: refused at the door, never
    # forwarded or recorded. `_` is a token character and a tab a value's own.
    assert answers == [b"HTTP/1.1 200 OK", b"HTTP/1.1 400 Bad Request"]
    assert code == 0 and counters["proxied"] == counters["written"] == 1
    [line] = rec.lines()[1:]
    assert ["X_Under", "1"] in line["headers"] and ["X-Tab", "a\tb"] in line["headers"]
    replay = subprocess.run(
        [*replay_command(engine_path, chunked_echo, rec.out), "--duration", "0.1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert replay.returncode == 0, replay.stderr


def test_an_upstream_that_is_down_gets_502_and_is_counted(recorder: StartRecorder) -> None:
    rec = recorder(f"http://127.0.0.1:{closed_port()}")
    [(status, body, _)] = get_all(rec.url, ["/api/feed?user=1"])
    assert status == 502 and b"connection refused" in body
    stats = rec.stats()
    assert stats["upstream_errors"] == 1 and stats["proxied"] == 1


class _ChunkedEcho(BaseHTTPRequestHandler):
    """Echoes the request body (chunked or not) in a chunked response."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(0, len(body), 1000):
            piece = body[i : i + 1000]
            self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def chunked_echo() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedEcho)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_chunked_bodies_pass_intact_both_ways(chunked_echo: str, recorder: StartRecorder) -> None:
    rec = recorder(chunked_echo)
    payload = bytes(range(256)) * 40  # 10,240 bytes, every byte value
    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    for _ in range(2):  # twice on one keep-alive connection
        pieces = iter([payload[:3000], payload[3000:3001], payload[3001:]])
        conn.request("POST", "/upload?id=1", body=pieces, encode_chunked=True)
        resp = conn.getresponse()
        assert resp.status == 200
        assert resp.read() == payload
    conn.close()
    assert rec.stop()[0] == 0
    requests = rec.lines()[1:]
    assert len(requests) == 2
    assert all(base64.b64decode(r["body_b64"]) == payload for r in requests)


# --------------------------------------------------------------------------- sampling


def test_uniform_sampling_is_within_its_binomial_band(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    """False failure: none: the sampler is seeded (--seed 7) and draws once per request, so the
    count is the same on every run, whatever the threads' order; the writer's queue (4,096) holds
    every sample, so none is dropped. The band is 3.29 sd: about 1 seed in 1,000 would fail it."""
    n, p = 4000, 0.25
    svc = sample_service()
    rec = recorder(svc.url, "--sample", str(p), "--seed", "7")
    results = get_all(rec.url, ["/healthz"] * n, threads=4)
    assert all(status == 200 for status, _, _ in results)
    code, counters = rec.stop()
    assert code == 0
    recorded = len(rec.lines()) - 1
    # 99.9% band of Binomial(4000, 0.25): 3.29 standard deviations either side.
    sd = math.sqrt(n * p * (1 - p))
    assert abs(recorded - n * p) <= 3.29 * sd, recorded
    assert counters["proxied"] == n
    assert counters["sampled"] == counters["written"] == recorded


def _drive(url: str, paths: list[str], duration_s: float) -> int:
    """Sends the paths round-robin on one keep-alive connection for a while."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    sent = 0
    deadline = time.monotonic() + duration_s
    while time.monotonic() < deadline:
        conn.request("GET", paths[sent % len(paths)])
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 200
        sent += 1
    conn.close()
    return sent


def test_the_reservoir_never_exceeds_k_and_fills_every_interval(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    """False failure: about 1e-4 (not measured): an interval fills its 5 unless the client sends
    fewer than 5 requests in 200 ms, a pause of about 180 ms when it sends hundreds; the longest
    pauses recorded on this machine are 33 to 46 ms (bench/RESULTS.md, engine and recorder)."""
    k, interval_us = 5, 200_000
    svc = sample_service()
    rec = recorder(svc.url, "--reservoir", "5/200ms", "--seed", "3")
    sent = _drive(rec.url, ["/healthz"], 1.5)
    assert rec.stop()[0] == 0
    per_interval = Counter(r["ts_us"] // interval_us for r in rec.lines()[1:])
    assert max(per_interval.values()) <= k
    # Traffic flowed throughout (hundreds of requests per interval), so every interval
    # between the first and the last, which are partial, holds exactly K.
    first, last = min(per_interval), max(per_interval)
    assert sent > 20 * (last - first + 1)
    assert all(per_interval[i] == k for i in range(first + 1, last))
    assert last - first >= 5


def test_the_per_endpoint_reservoir_keeps_k_of_each_label(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    """False failure: about 1e-4 (not measured): an interval fills its 3 of /warm unless the client
    sends fewer than 12 requests in 200 ms, a pause of well over 100 ms; the longest pauses recorded
    on this machine are 33 to 46 ms (bench/RESULTS.md, engine and recorder)."""
    svc = sample_service()
    rec = recorder(
        svc.url, "--reservoir", "3/200ms", "--reservoir-per-endpoint", "--label", "^/warm=warm"
    )
    _drive(rec.url, ["/healthz", "/healthz", "/healthz", "/warm"], 1.2)
    assert rec.stop()[0] == 0
    per_key = Counter((r["ts_us"] // 200_000, r["endpoint"]) for r in rec.lines()[1:])
    intervals = sorted({i for i, _ in per_key})
    assert max(per_key.values()) <= 3
    for i in intervals[1:-1]:
        assert per_key[(i, "/healthz")] == 3 and per_key[(i, "warm")] == 3


# --------------------------------------------------------------------------- stopping


def test_sigterm_during_heavy_traffic_leaves_a_whole_replayable_file(
    sample_service: StartSampleService, recorder: StartRecorder, engine_path: Path
) -> None:
    """False failure: about 1e-4 (not measured): 500 writes at 3,000/s take about 0.2 s of the 10 s
    allowed, and the stop must end within 3 s; the file's wholeness does not depend on timing."""
    svc = sample_service()
    rec = recorder(svc.url)
    load_args = ["--path", "/healthz", "--rate", "3000", "--duration", "3", "--timeout-ms", "500"]
    load = subprocess.Popen(
        [str(engine_path), "load", "--target", f"a={rec.url}", *load_args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for(lambda: rec.stats()["written"] > 500, timeout_s=10)
        stopped_at = time.monotonic()
        code, counters = rec.stop(signal.SIGTERM)
        stop_s = time.monotonic() - stopped_at
    finally:
        load.kill()
        load.wait()
    assert code == 0
    assert stop_s < 3.0
    text = rec.out.read_text()
    assert text.endswith("\n")
    lines = [json.loads(line) for line in text.splitlines()]  # every line is whole JSON
    assert counters["written"] == len(lines) - 1
    assert counters["written"] + counters["dropped"] == counters["sampled"]
    assert counters["sampled"] <= counters["proxied"]

    replay = subprocess.run(
        [*replay_command(engine_path, svc.url, rec.out), "--duration", "0.2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert replay.returncode == 0, replay.stderr


def test_the_stats_path_counts_add_up_and_is_never_forwarded(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    svc = sample_service()
    rec = recorder(svc.url, "--sample", "0.5", "--seed", "1")
    get_all(rec.url, ["/api/profile?user=1"] * 200, threads=2)
    stats = rec.stats()
    assert stats["proxied"] == 200
    assert 0 < stats["sampled"] < 200
    assert stats["written"] + stats["dropped"] <= stats["sampled"]
    assert set(stats) == {
        "proxied",
        "sampled",
        "written",
        "dropped",
        "mirrored",
        "mirror_dropped",
        "upstream_errors",
    }
    # The sample service never saw the stats requests.
    metrics = svc.metrics()
    assert metrics.get('sample_requests_total{endpoint="other",status="404"}', 0) == 0
    assert metrics['sample_requests_total{endpoint="/api/profile",status="200"}'] == 200
    code, final = rec.stop()
    assert code == 0
    assert final["written"] + final["dropped"] == final["sampled"] == stats["sampled"]


# --------------------------------------------------------------------------- mirror


@pytest.fixture
def silent_socket() -> Iterator[int]:
    """A port that accepts connections into its backlog and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("mirror_state", ["down", "slow"])
def test_a_mirror_that_is_down_or_slow_changes_nothing_live(
    mirror_state: str,
    sample_service: StartSampleService,
    recorder: StartRecorder,
    silent_socket: int,
) -> None:
    """False failure: under 1e-3 (not measured): the two recorders are interleaved in chunks of 25
    so the machine's noise hits both, and the medians of 150 requests must differ by 1 ms, several
    times a loopback request, for a cost the live path does not wait on."""
    svc = sample_service()
    mirror_port = closed_port() if mirror_state == "down" else silent_socket
    plain = recorder(svc.url)
    mirrored = recorder(
        svc.url,
        "--mirror",
        f"http://127.0.0.1:{mirror_port}",
        "--mirror-all",
        "--mirror-timeout-ms",
        "300",
        "--mirror-queue",
        "16",
    )
    paths = [f"/api/profile?user={i}" for i in range(150)]
    direct = get_all(svc.url, paths)
    # Interleave the two recorders so that machine noise hits both alike.
    with_mirror: list[float] = []
    without: list[float] = []
    for start in range(0, len(paths), 25):
        chunk = paths[start : start + 25]
        a = get_all(mirrored.url, chunk)
        b = get_all(plain.url, chunk)
        assert [(s, body) for s, body, _ in a] == [(s, body) for s, body, _ in direct[start:][:25]]
        with_mirror += [t for _, _, t in a]
        without += [t for _, _, t in b]
    # Medians within 1 ms: a dead or stuck mirror costs the live path nothing it waits on.
    assert statistics.median(with_mirror) < statistics.median(without) + 0.001
    stats = mirrored.stats()
    assert stats["mirrored"] == 0 and stats["upstream_errors"] == 0
    if mirror_state == "down":
        assert wait_for(lambda: mirrored.stats()["mirror_dropped"] == len(paths))
    else:
        assert stats["mirror_dropped"] > 0


def test_a_working_mirror_receives_the_sampled_requests(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    """False failure: about 1e-5: 60 mirrored requests must arrive within 5 s of the last sent."""
    live, test_instance = sample_service(), sample_service()
    rec = recorder(live.url, "--sample", "0.3", "--seed", "5", "--mirror", test_instance.url)
    get_all(rec.url, [f"/api/profile?user={i}" for i in range(200)])
    series = 'sample_requests_total{endpoint="/api/profile",status="200"}'
    sampled = rec.stats()["sampled"]
    assert wait_for(lambda: test_instance.metrics()[series] == sampled)
    assert wait_for(lambda: rec.stats()["mirrored"] == sampled)
    assert live.metrics()[series] == 200


class _SlowMirror(BaseHTTPRequestHandler):
    """A test instance that takes 400 ms per request and counts what it answered."""

    protocol_version = "HTTP/1.1"
    answered = 0
    lock = threading.Lock()

    def do_GET(self) -> None:
        time.sleep(0.4)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
        with _SlowMirror.lock:
            _SlowMirror.answered += 1

    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_the_final_counters_account_for_every_mirror_request(
    sample_service: StartSampleService, recorder: StartRecorder
) -> None:
    """False failure: about 1e-5: one mirror connection at 400 ms a request answers 1 to 3 of the 40
    in the drain's second after the stop, never none (the first takes 400 ms) and never all 40 (16
    s)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowMirror)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        svc = sample_service()
        rec = recorder(
            svc.url,
            "--mirror",
            f"http://127.0.0.1:{server.server_address[1]}",
            "--mirror-all",
            "--mirror-connections",
            "1",
            "--mirror-timeout-ms",
            "2000",
        )
        get_all(rec.url, [f"/api/profile?user={i}" for i in range(40)])

        # Stopped while most mirror requests still wait in the queue.
        code, counters = rec.stop()
    finally:
        server.shutdown()
        server.server_close()

    assert code == 0
    assert counters["proxied"] == 40
    # Each request was mirrored or dropped, and counted before the final line was written.
    assert counters["mirrored"] + counters["mirror_dropped"] == 40
    assert 0 < counters["mirrored"] == _SlowMirror.answered
    assert counters["mirror_dropped"] > 0


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--sample", "1.5"], "--sample"),
        (["--sample", "0"], "--sample"),
        (["--reservoir", "0/1s"], "--reservoir"),
        (["--reservoir", "10/1parsec"], "--reservoir"),
        (["--label", "(unclosed=x"], "--label"),
        (["--label", "no-equals-sign"], "--label"),
        (["--upstream", "ftp://127.0.0.1:1"], "--upstream"),
        (["--mirror", "127.0.0.1:1"], "--mirror"),
        (["--out", "/nonexistent-dir/trace.jsonl"], "--out"),
        (["--sample", "0.5", "--reservoir", "1/1s"], "--reservoir"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    engine_path: Path, tmp_path: Path, extra: list[str], flag: str
) -> None:
    command = [str(engine_path), "record", "--listen", "127.0.0.1:0"]
    command += ["--upstream", "http://127.0.0.1:1", "--out", str(tmp_path / "t.jsonl")]
    out = subprocess.run(command + extra, capture_output=True, text=True, timeout=10)
    assert out.returncode == 2
    assert flag in out.stderr
    assert "listening" not in out.stdout


def test_reservoir_syntax_is_the_same_as_trace_samples(engine_path: Path, tmp_path: Path) -> None:
    from hairline.errors import ConfigError

    texts = ["100/1s", "10/500ms", "5/1m", "1/1.5s", "100/s", "7/250us", "3/0.1ms", "2/1h"]
    texts += ["0/1s", "5/1", "5/1d", "5/.5s", "5/1 s", "5/0.0000001s", "x/1s", "5/0s"]
    # Another bad flag makes every run fail before listening; the message names
    # --reservoir only when the engine refuses that too.
    command = [str(engine_path), "record", "--listen", "127.0.0.1:0", "--stats-path", "bad"]
    command += ["--upstream", "http://127.0.0.1:1", "--out", str(tmp_path / "t.jsonl")]
    for text in texts:
        try:
            shape.parse_reservoir(text)
            python_accepts = True
        except ConfigError:
            python_accepts = False
        out = subprocess.run(
            [*command, f"--reservoir={text}"], capture_output=True, text=True, timeout=10
        )
        assert out.returncode == 2
        assert ("--reservoir" not in out.stderr) == python_accepts, (text, out.stderr)


# --------------------------------------------------------------------------- hairline record


def test_engine_args_pass_only_the_options_given() -> None:
    args = engine_args(
        listen="127.0.0.1:0",
        upstream="http://127.0.0.1:1",
        out=Path("t.jsonl"),
        sample=0.25,
        labels=["^/a=-a"],
        mirror="http://127.0.0.1:2",
        mirror_all=True,
    )
    assert args == [
        "record",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:1",
        "--out",
        "t.jsonl",
        "--sample=0.25",
        "--mirror=http://127.0.0.1:2",
        "--label=^/a=-a",
        "--mirror-all",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--sample", "1.5"], "--sample"),
        (["--sample", "0.1", "--reservoir", "1/1s"], "--reservoir"),
        (["--mirror-all"], "--mirror"),
    ],
)
def test_hairline_record_refuses_bad_flags_with_exit_2(extra: list[str], message: str) -> None:
    base = ["record", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:1"]
    result = CliRunner().invoke(main, [*base, "--out", "t.jsonl", *extra])
    assert result.exit_code == 2
    assert message in result.output


def _hairline(engine_path: Path, *args: str, **popen: Any) -> subprocess.Popen[str]:
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path)}
    command = [sys.executable, "-c", "from hairline.cli import main; main()", *args]
    return subprocess.Popen(command, env=env, text=True, **popen)


def test_hairline_record_passes_engine_errors_through(engine_path: Path, tmp_path: Path) -> None:
    proc = _hairline(
        engine_path,
        "record",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "http://127.0.0.1:1",
        "--out",
        str(tmp_path / "t.jsonl"),
        "--reservoir",
        "5/soon",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 2
    assert "--reservoir" in stderr


def test_hairline_record_forwards_sigterm_and_flushes(
    engine_path: Path, tmp_path: Path, sample_service: StartSampleService
) -> None:
    svc = sample_service()
    out = tmp_path / "t.jsonl"
    proc = _hairline(
        engine_path,
        "record",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        svc.url,
        "--out",
        str(out),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        first = _first_line(proc, START_TIMEOUT_S + 10) or ""
        assert first.startswith("listening on "), first
        url = "http://" + first.removeprefix("listening on ")
        assert [s for s, _, _ in get_all(url, ["/healthz", "/warm"])] == [200, 200]
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    assert json.loads(stderr.strip().splitlines()[-1])["written"] == 2
    assert [json.loads(line).get("path") for line in out.read_text().splitlines()[1:]] == [
        "/healthz",
        "/warm",
    ]
