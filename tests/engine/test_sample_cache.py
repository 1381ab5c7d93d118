"""`hairline-engine sample-cache`: a dependency of limited capacity, alone and behind the
sample service's `--cache`, over real TCP on loopback."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from suitekit import StartSampleService

_LISTENING = re.compile(r"^listening on (?P<host>.+):(?P<port>\d+)$")


@dataclass
class SampleCache:
    proc: subprocess.Popen[str]
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=10)

    def stats(self) -> dict[str, int]:
        with self.connect() as conn:
            answer = roundtrip(conn, b"stats\r\n", b"END\r\n")
        return {
            name: int(value) for name, value in re.findall(r"STAT (\w+) (\d+)", answer.decode())
        }

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode


StartSampleCache = Callable[..., SampleCache]


@pytest.fixture
def sample_cache(engine_path: Path) -> Iterator[StartSampleCache]:
    """A factory: ``sample_cache(slots=2, service_us=1000)`` starts one on a free port."""
    started: list[SampleCache] = []

    def start(*, slots: int, service_us: int) -> SampleCache:
        command = [str(engine_path), "sample-cache", "--port", "0"]
        command += ["--slots", str(slots), "--service-us", str(service_us)]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        match = _LISTENING.match(proc.stdout.readline().strip())
        assert match is not None, f"`{' '.join(command)}` did not say where it listens"
        cache = SampleCache(proc=proc, host=match["host"], port=int(match["port"]))
        started.append(cache)
        return cache

    yield start
    for cache in started:
        cache.stop()


def roundtrip(conn: socket.socket, request: bytes, end: bytes) -> bytes:
    conn.sendall(request)
    answer = b""
    while not answer.endswith(end):
        chunk = conn.recv(4096)
        assert chunk, f"connection closed after {answer!r}"
        answer += chunk
    return answer


def hammer(cache: SampleCache, clients: int, duration_s: float) -> list[float]:
    """Gets as fast as `clients` connections can, for `duration_s`; each get's seconds."""
    latencies_s: list[float] = []
    lock = threading.Lock()

    def client(index: int) -> None:
        mine: list[float] = []
        deadline = time.monotonic() + duration_s
        with cache.connect() as conn:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                roundtrip(conn, f"get user:{index}\r\n".encode(), b"END\r\n")
                mine.append(time.perf_counter() - started)
        with lock:
            latencies_s.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies_s


def test_a_get_answers_its_value_and_stats_count_it(sample_cache: StartSampleCache) -> None:
    cache = sample_cache(slots=1, service_us=100)
    with cache.connect() as conn:
        answer = roundtrip(conn, b"get user:42\r\n", b"END\r\n")
        header, value, end = answer.split(b"\r\n", 2)
        assert header.startswith(b"VALUE user:42 0 ")
        assert len(value) == int(header.split()[-1]) and end == b"END\r\n"
        # The value is a function of the key: the same on every get and every cache.
        assert roundtrip(conn, b"get user:42\r\n", b"END\r\n") == answer
        assert roundtrip(conn, b"set x 0 0 1\r\n", b"\r\n") == b"ERROR\r\n"
        assert roundtrip(conn, b"get a b\r\n", b"\r\n") == b"CLIENT_ERROR one key per get\r\n"
    assert cache.stats() == {"gets": 2, "waiting": 0}


def test_capacity_is_slots_over_service_time_and_the_rest_wait_in_line(
    sample_cache: StartSampleCache,
) -> None:
    """False failure: about 1e-3 under load (not measured). The cache's capacity is exact (slots are
    kept as times); the served rate's 10% and the mean wait's 6 to 12 ms (8 expected) need the 8
    Python clients to keep 6 gets waiting, which a loaded machine can fail to do."""
    # 2 slots x 2 ms: 1,000 gets/s; 8 clients keep 6 gets waiting at any time.
    cache = sample_cache(slots=2, service_us=2000)
    before = cache.stats()["gets"]
    started = time.monotonic()
    latencies_s = hammer(cache, clients=8, duration_s=2.0)
    elapsed_s = time.monotonic() - started
    served = cache.stats()["gets"] - before

    assert served == len(latencies_s)
    assert served / elapsed_s == pytest.approx(1000, rel=0.1)
    # Each get waits for the three ahead of it on its slot: about 4 x 2 ms in all.
    mean_ms = 1000 * sum(latencies_s) / len(latencies_s)
    assert 6.0 < mean_ms < 12.0, f"mean get {mean_ms:.1f} ms"


def test_one_client_is_served_in_the_service_time(sample_cache: StartSampleCache) -> None:
    """False failure: about 1e-3 under load (not measured). The 2 ms floor is exact (a slot sleeps
    its time); the median's 1.5 ms of headroom for the round trip and wake-ups holds unless most
    gets of the half second are delayed, which one pause (the longest recorded on this machine are
    33 to 46 ms, bench/RESULTS.md) does not do to a median."""
    cache = sample_cache(slots=2, service_us=2000)
    latencies_s = hammer(cache, clients=1, duration_s=0.5)
    median_ms = 1000 * sorted(latencies_s)[len(latencies_s) // 2]
    assert 2.0 <= median_ms < 3.5, f"median get {median_ms:.2f} ms"


def test_bad_flags_exit_2_naming_the_flag(engine_path: Path) -> None:
    for flag, value in (("--slots", "0"), ("--service-us", "0"), ("--host", "nohost")):
        done = subprocess.run(
            [str(engine_path), "sample-cache", "--port", "0", flag, value],
            capture_output=True,
            text=True,
            timeout=10,
        )
        assert done.returncode == 2
        assert f"{flag} " in done.stderr, done.stderr


def test_sigterm_stops_it(sample_cache: StartSampleCache) -> None:
    cache = sample_cache(slots=1, service_us=100)
    with cache.connect():
        assert cache.stop() == 0


def histogram_mean_s(metrics: dict[str, float], name: str) -> float:
    return metrics[f"{name}_sum"] / metrics[f"{name}_count"]


def test_the_service_reports_the_wait_on_its_cache_and_answers_503_without_it(
    sample_service: StartSampleService, sample_cache: StartSampleCache
) -> None:
    """False failure: none in practice: every get holds its slot for at least 5 ms (a sleep never
    ends early), so the mean wait is over 5 ms, and a profile request's slept work is well under a
    third of that."""
    # One slot of 5 ms behind four sleeping workers: the cache is the bottleneck.
    cache = sample_cache(slots=1, service_us=5000)
    svc = sample_service("--threads", "4", "--work", "sleep", "--cache", cache.address)
    errors: list[int] = []

    def client() -> None:
        for user in range(10):
            status, _ = svc.get(f"/api/profile?user={user}")
            if status != 200:
                errors.append(status)

    threads = [threading.Thread(target=client) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    metrics = svc.metrics()
    assert errors == []
    assert metrics["sample_cache_wait_seconds_count"] == 40
    assert cache.stats()["gets"] == 40
    cache_wait_s = histogram_mean_s(metrics, "sample_cache_wait_seconds")
    work_s = histogram_mean_s(metrics, "sample_work_seconds")
    assert cache_wait_s > 0.005 and cache_wait_s > 3 * work_s, (cache_wait_s, work_s)

    cache.stop()
    status, body = svc.get("/api/profile?user=1")
    assert status == 503 and "cache" in body
    metrics = svc.metrics()
    assert metrics["sample_cache_errors_total"] == 1
    assert metrics['sample_requests_total{endpoint="/api/profile",status="503"}'] == 1
    # Work is not done for a request the cache failed.
    assert metrics["sample_work_seconds_count"] == 40
