"""`hairline-engine sample-service` and `sample-trace`, over real HTTP on loopback."""

from __future__ import annotations

import http.client
import json
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from hairline.collect.procfs import cpu_time_ns
from hairline.engine import LoadPlan, run_load
from suitekit import SampleService, StartSampleService, parse_prometheus

API_ENDPOINTS = ("/api/feed", "/api/profile", "/api/search")


def work_units(svc: SampleService) -> float:
    return svc.metrics()["sample_cpu_work_units_total"]


def cpu_ns(pid: int) -> int:
    return cpu_time_ns([pid])


def send_all(svc: SampleService, paths: list[str], request_ids: list[str] | None = None) -> None:
    """Sends the paths one after another on one keep-alive connection."""
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=10)
    try:
        for i, path in enumerate(paths):
            headers = {"x-hairline-request-id": request_ids[i]} if request_ids else {}
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, f"{path}: {resp.status} {body!r}"
    finally:
        conn.close()


def test_every_endpoint_answers(sample_service: StartSampleService) -> None:
    svc = sample_service()
    for endpoint in API_ENDPOINTS:
        status, body = svc.get(f"{endpoint}?user=42")
        assert status == 200
        answer = json.loads(body)
        assert answer["endpoint"] == endpoint and answer["user"] == 42
        assert answer["work_units"] > 0
    assert svc.get("/healthz") == (200, "ok\n")
    assert svc.get("/warm")[0] == 200
    assert svc.get("/no/such/path")[0] == 404
    status, body = svc.get("/api/feed?user=abc")
    assert status == 400 and "user must be a non-negative integer" in body


def test_metrics_parse_and_count_requests_and_reads(sample_service: StartSampleService) -> None:
    """False failure: none: the counts are exact, and the start time has an hour of margin against a
    service started a moment ago."""
    svc = sample_service("--extra-reads", "3")
    send_all(svc, ["/api/feed?user=1", "/api/feed?user=2", "/api/profile?user=1"])
    svc.get("/nope")
    metrics = svc.metrics()
    assert metrics['sample_requests_total{endpoint="/api/feed",status="200"}'] == 2
    assert metrics['sample_requests_total{endpoint="/api/profile",status="200"}'] == 1
    assert metrics['sample_requests_total{endpoint="/api/search",status="200"}'] == 0
    assert metrics['sample_requests_total{endpoint="other",status="404"}'] == 1
    # A feed request does 8 downstream reads and a profile request 2, each plus --extra-reads.
    assert metrics['sample_downstream_reads_total{endpoint="/api/feed"}'] == 2 * (8 + 3)
    assert metrics['sample_downstream_reads_total{endpoint="/api/profile"}'] == 2 + 3
    assert metrics["sample_warm"] == 1
    assert metrics["process_start_time_seconds"] > time.time() - 3600
    assert metrics["sample_cpu_work_units_total"] > 0


def test_the_same_request_costs_the_same_on_two_instances(
    sample_service: StartSampleService,
) -> None:
    a, b = sample_service(), sample_service()
    paths = [API_ENDPOINTS[i % 3] for i in range(60)]
    ids = [f"req-{i:06d}" for i in range(60)]
    send_all(a, paths, ids)
    send_all(b, paths, ids)
    assert work_units(a) == work_units(b)
    # A different request stream costs something else: the counter is not a constant.
    c = sample_service()
    send_all(c, paths, [f"other-{i}" for i in range(60)])
    assert work_units(c) != work_units(a)


def test_a_named_user_costs_the_same_whatever_the_request_id(
    sample_service: StartSampleService,
) -> None:
    svc = sample_service()
    answers = [
        json.loads(svc.get("/api/search?user=77", headers={"x-hairline-request-id": rid})[1])
        for rid in ("a", "b")
    ]
    assert answers[0]["work_units"] == answers[1]["work_units"]


def test_regress_cpu_costs_about_that_much_more_cpu_per_request(
    sample_service: StartSampleService,
) -> None:
    """False failure: probably under 1e-3 on a quiet machine (not measured): the median of 9 paired,
    alternating rounds must move 6 points (1.10 to 1.04) or 8 (to 1.18), but the spread of a round's
    ratio on this VM, where steal counts as CPU time, is not recorded."""
    base = sample_service("--threads", "1")
    slower = sample_service("--threads", "1", "--regress-cpu", "0.1")
    # Heavy requests (a few ms each), so the fixed cost of HTTP hardly dilutes the 10%.
    costs = {u: json.loads(base.get(f"/api/feed?user={u}")[1])["work_units"] for u in range(1, 301)}
    heaviest = sorted(costs, key=costs.__getitem__)[-40:]
    paths = [f"/api/feed?user={u}" for u in heaviest]
    for svc in (base, slower):
        send_all(svc, paths)  # fault in what the first requests touch, on both alike
    # Paired rounds, alternating which goes first; the median of the per-round ratios is
    # robust to a round disturbed by other load (in a VM, steal time counts as CPU time).
    ratios = []
    for round_ in range(9):
        spent_ns = {}
        for svc in (base, slower) if round_ % 2 == 0 else (slower, base):
            before = cpu_ns(svc.pid)
            send_all(svc, paths)
            spent_ns[svc.pid] = cpu_ns(svc.pid) - before
        ratios.append(spent_ns[slower.pid] / spent_ns[base.pid])
    ratio = statistics.median(ratios)
    assert 1.04 < ratio < 1.18, f"median CPU ratio {ratio:.3f} of rounds {ratios}"


def histogram_mean_s(metrics: dict[str, float], name: str) -> float:
    return metrics[f"{name}_sum"] / metrics[f"{name}_count"]


def test_work_sleep_does_the_same_work_without_burning_the_cpu(
    sample_service: StartSampleService,
) -> None:
    """False failure: about 1e-2 under load (not measured). The work units are exact; the CPU ratio
    (bound 0.3) and the slept time (at most 1.6 times the units' microseconds, where a loaded
    machine's late wake-ups add to every sleep) have margins not recorded."""
    burning = sample_service("--threads", "1")
    sleeping = sample_service("--threads", "1", "--work", "sleep")
    paths = [f"/api/feed?user={u}" for u in range(1, 101)]
    spent_ns = {}
    for svc in (burning, sleeping):
        before = cpu_ns(svc.pid)
        send_all(svc, paths)
        spent_ns[svc.pid] = cpu_ns(svc.pid) - before
    # The same work units, deterministic per request, whatever they are spent on.
    assert work_units(burning) == work_units(sleeping)
    assert spent_ns[sleeping.pid] < 0.3 * spent_ns[burning.pid], spent_ns
    # A unit sleeps 1 us: the work histogram holds about the units' microseconds.
    work_s = sleeping.metrics()["sample_work_seconds_sum"]
    assert 1.0 <= work_s / (work_units(sleeping) * 1e-6) < 1.6


def test_every_api_request_is_timed_in_queue_and_work(sample_service: StartSampleService) -> None:
    svc = sample_service()
    before = svc.metrics()
    for name in ("sample_queue_seconds", "sample_work_seconds", "sample_cache_wait_seconds"):
        assert before[f"{name}_count"] == 0
        assert before[f'{name}_bucket{{le="+Inf"}}'] == 0
    send_all(svc, [f"/api/search?user={u}" for u in range(10)])
    svc.get("/healthz")
    after = svc.metrics()
    assert after["sample_queue_seconds_count"] == 10
    assert after["sample_work_seconds_count"] == 10
    assert after['sample_work_seconds_bucket{le="+Inf"}'] == 10
    assert after["sample_cache_wait_seconds_count"] == 0  # no --cache
    buckets = [v for k, v in after.items() if k.startswith("sample_work_seconds_bucket")]
    assert buckets == sorted(buckets), "buckets are cumulative"


def overloaded_queue_and_work_s(svc: SampleService) -> tuple[dict[str, float], float, float]:
    """/metrics after 1 s of 1.5x the capacity of a one-worker service that sleeps ~2 ms a
    request (~500/s), over 32 connections, and its mean queue and work times."""
    units = json.loads(svc.get("/api/profile?user=1")[1])["work_units"]
    capacity_per_s = 1e6 / units
    run_load(
        LoadPlan(
            targets=(("a", svc.url),),
            paths=("/api/profile?user=1",),
            rate_per_s=1.5 * capacity_per_s,
            duration_s=1.0,
            timeout_ms=10_000,
            spin_us=0,
        )
    )
    metrics = svc.metrics()
    work_s = histogram_mean_s(metrics, "sample_work_seconds")
    assert work_s == pytest.approx(units * 1e-6, rel=0.5)
    return metrics, histogram_mean_s(metrics, "sample_queue_seconds"), work_s


def test_queue_time_counts_the_wait_in_the_socket_buffer(
    sample_service: StartSampleService, engine_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False failure: under 1e-3: the queue is set by the 32 connections, not by noise (a request
    waits for about 31 ahead of it: 45 ms against 1.5 ms of work, docs/engine.md), three times the
    bound of 10; it falls only if the engine cannot offer 750/s, and the work's 50% tolerance is far
    above a sleep's late wake-up. The kernel stamps every segment once stamping is on; only the
    first ones after it is first switched on may go unstamped, a handful against 1% of ~750."""
    monkeypatch.setenv("HAIRLINE_ENGINE", str(engine_path))
    # The requests wait in the kernel's buffers of connections the worker is not reading yet.
    svc = sample_service("--threads", "1", "--work", "sleep", "--regress-cpu", "40")
    metrics, queue_s, work_s = overloaded_queue_and_work_s(svc)
    assert queue_s > 10 * work_s, f"queue {queue_s * 1e3:.2f} ms, work {work_s * 1e3:.2f} ms"
    # Timed from the kernel's stamps, so (almost) none is counted as timed from its read.
    timed = metrics["sample_queue_seconds_count"]
    assert metrics["sample_queue_unstamped_total"] <= 0.01 * timed, metrics


def test_without_kernel_timestamps_queueing_is_under_measured_and_counted(
    sample_service: StartSampleService, engine_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False failure: under 1e-3: the count is exact (every request is read without a stamp), and
    the queue from the read is the few microseconds from a read to its handling, under the ~2 ms
    sleep of work that the overload makes ~45 ms of real queueing (the test above)."""
    monkeypatch.setenv("HAIRLINE_ENGINE", str(engine_path))
    # The same overload as above, on a service that behaves as on a kernel without stamps.
    svc = sample_service(
        "--threads", "1", "--work", "sleep", "--regress-cpu", "40", "--test-no-recv-timestamps"
    )
    metrics, queue_s, work_s = overloaded_queue_and_work_s(svc)
    # The wait in the socket buffers is missed: the queue reads below one request's work...
    assert queue_s < work_s, f"queue {queue_s * 1e3:.2f} ms, work {work_s * 1e3:.2f} ms"
    # ...and every API request is counted as timed from its read.
    timed = metrics["sample_queue_seconds_count"]
    assert timed > 500
    assert metrics["sample_queue_unstamped_total"] == timed


def test_regress_mem_keeps_more_memory_resident(sample_service: StartSampleService) -> None:
    base = sample_service("--threads", "1")
    fatter = sample_service("--threads", "1", "--regress-mem", "100000")
    paths = [f"/api/profile?user={u}" for u in range(1, 301)]
    for svc in (base, fatter):
        send_all(svc, paths)
    rss = {svc.pid: svc.metrics()["process_resident_memory_bytes"] for svc in (base, fatter)}
    # 256 retained buffers of 100 kB each: about 25 MB more.
    assert rss[fatter.pid] - rss[base.pid] > 20e6, rss


def test_warm_flips_after_the_warmup(sample_service: StartSampleService) -> None:
    """False failure: about 1e-4: the two requests after the first API request must come within its
    1 s warm-up, and the longest pauses recorded on this machine are 33 to 46 ms (bench/RESULTS.md,
    engine and recorder); after the 1.1 s sleep the service's clock has passed 1 s for certain (both
    clocks are monotonic)."""
    svc = sample_service(warmup_s=1.0)
    # The warm-up clock starts at the first API request, as a JIT's would.
    assert svc.get("/warm")[0] == 503
    cold = json.loads(svc.get("/api/feed?user=9")[1])["work_units"]
    assert svc.get("/warm")[0] == 503
    assert svc.metrics()["sample_warm"] == 0
    time.sleep(1.1)
    assert svc.get("/warm")[0] == 200
    assert svc.metrics()["sample_warm"] == 1
    warm = json.loads(svc.get("/api/feed?user=9")[1])["work_units"]
    # Cold requests start at 3x the work.
    assert cold > 2.5 * warm * 0.9


def test_keep_alive_and_pipelined_requests_are_answered_in_order(
    sample_service: StartSampleService,
) -> None:
    svc = sample_service()
    with socket.create_connection((svc.host, svc.port), timeout=5) as sock:
        sock.sendall(
            b"GET /api/profile?user=1 HTTP/1.1\r\nHost: x\r\n\r\n"
            b"GET /api/profile?user=2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.count(b"HTTP/1.1 200 OK") == 2
    assert received.index(b'"user":1') < received.index(b'"user":2')


def test_workers_default_to_the_cpus_the_process_may_use(engine_path: Path) -> None:
    one_cpu = min(os.sched_getaffinity(0))
    proc = subprocess.Popen(
        ["taskset", "-c", str(one_cpu), str(engine_path), "sample-service", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("listening on ")
        # The main thread accepts; one worker per allowed CPU.
        assert len(list(Path(f"/proc/{proc.pid}/task").iterdir())) == 2
    finally:
        proc.terminate()
        proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()


def test_sigterm_stops_the_service_cleanly(sample_service: StartSampleService) -> None:
    svc = sample_service()
    send_all(svc, ["/api/profile?user=3"])
    assert svc.stop() == 0


def test_sigterm_stops_the_service_at_once_not_at_its_workers_next_poll(
    sample_service: StartSampleService,
) -> None:
    """False failure: under 1e-4: a stop took 3-5 ms (2026-11-28, 20 in a row), against a
    bound of 40 ms; before the fix it took until the workers' next 100 ms poll (50-100 ms,
    80 ms at this test's 120 ms), which a bound of 40 ms tells apart. Only a 35 ms stall of
    this process on a 2-vCPU machine fails it."""
    svc = sample_service("--threads", "4")
    send_all(svc, ["/api/profile?user=3"])
    time.sleep(0.12)  # mid-way through the workers' idle polls
    started = time.monotonic()
    assert svc.stop() == 0
    assert time.monotonic() - started < 0.04


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--regress-cpu", "abc"], "--regress-cpu"),
        (["--regress-cpu", "-2"], "--regress-cpu"),
        (["--warmup-s", "-1"], "--warmup-s"),
        (["--threads", "0"], "--threads"),
        (["--host", "localhost:80"], "--host"),
        (["--regress-mem", "-5"], "--regress-mem"),
        (["--work", "gpu"], "--work"),
        (["--cache", "notaport"], "--cache notaport"),
        (["--stall-every", "300"], "--stall-every 300"),
        (["--stall-ms", "20"], "--stall-ms 20"),
        (["--stall-every", "1", "--stall-ms", "20"], "--stall-every 1"),
        (["--stall-every", "300", "--stall-ms", "0"], "--stall-ms 0"),
        (["--stall-every", "300", "--stall-ms", "-5"], "--stall-ms -5"),
        (["--stall-seed", "3"], "--stall-seed 3"),
        (["--code-cache", "16"], "--code-cache 16"),
        (["--ops", "8", "--op-groups", "9"], "--op-groups 9"),
        (["--ops", "8", "--code-cache", "0"], "--code-cache 0"),
        (["--ops", "8", "--miss-units", "5"], "--miss-units 5"),
    ],
)
def test_bad_flags_fail_clearly(engine_path: Path, flags: list[str], expected: str) -> None:
    result = subprocess.run(
        [str(engine_path), "sample-service", "--port", "0", *flags],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2
    assert expected in result.stderr, result.stderr


def test_a_port_in_use_is_named(engine_path: Path, sample_service: StartSampleService) -> None:
    svc = sample_service()
    result = subprocess.run(
        [str(engine_path), "sample-service", "--port", str(svc.port)],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2
    assert f"port {svc.port}" in result.stderr and "already in use" in result.stderr


def test_sample_trace_is_seeded_jsonl(engine_path: Path, tmp_path: Path) -> None:
    """False failure: none: the trace is seeded. 500 arrivals at 1,000/s span 0.5 s with an sd of 22
    ms, so 0.4 to 0.6 s is 4.5 sd either side."""
    engine = str(engine_path)

    def generate(name: str, seed: int) -> Path:
        out = tmp_path / name
        subprocess.run(
            [engine, "sample-trace", "--requests", "500", "--seed", str(seed), "-o", str(out)],
            check=True,
            timeout=10,
        )
        return out

    first, again, other = generate("a.jsonl", 1), generate("b.jsonl", 1), generate("c.jsonl", 2)
    assert first.read_bytes() == again.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    header, *lines = [json.loads(line) for line in first.read_text().splitlines()]
    assert header["hairline_trace"] == 1 and header["source"] == "sample-trace"
    assert len(lines) == 500
    for request in lines:
        assert request["method"] == "GET"
        assert request["path"].startswith(request["endpoint"] + "?user=")
        assert request["endpoint"] in API_ENDPOINTS
        assert request["headers"] == {}
    stamps = [r["ts_us"] for r in lines]
    assert stamps == sorted(stamps)
    # 500 Poisson arrivals at 1,000/s span about half a second.
    assert 0.4e6 < stamps[-1] < 0.6e6


def test_sample_trace_writes_like_every_other_output(engine_path: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no" / "t.jsonl"
    command = [str(engine_path), "sample-trace", "--requests", "5"]
    refused = subprocess.run([*command, "-o", str(missing)], capture_output=True, text=True)
    assert refused.returncode == 2
    assert f"the directory {missing.parent} does not exist; create it" in refused.stderr

    out = tmp_path / "t.jsonl"
    out.write_text("previous\n")
    bad = subprocess.run([*command, "--rate-per-s", "0", "-o", str(out)], capture_output=True)
    assert bad.returncode == 2 and out.read_text() == "previous\n"
    subprocess.run([*command, "-o", str(out)], check=True, timeout=10)
    assert len(out.read_text().splitlines()) == 6
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]


def test_parse_prometheus_rejects_garbage() -> None:
    assert parse_prometheus('a_total{x="1"} 2\n# c\nb 3.5\n') == {'a_total{x="1"}': 2, "b": 3.5}
    with pytest.raises(ValueError, match="line 1"):
        parse_prometheus("not a sample line at all\n")
