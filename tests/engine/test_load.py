"""``hairline-engine load`` on loopback against real sample services.

Pacing figures on a shared machine are disturbed by whatever else runs, so these tests
check what the engine guarantees under any load (counts, ids, error kinds, that a stall
shows in corrected and not in uncorrected latency) and leave precision to the benchmarks.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import struct
import subprocess
import time
import zlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hairline.engine import (
    ControlledLoad,
    LoadPlan,
    find_engine,
    measure,
    read_requests,
    run_load,
    warm_up,
)
from hairline.errors import EngineError, HostLost
from hairline.kit.procs import thread_pinned_to
from hairline.lab.latency import latency_rows

# A cheap, fixed-cost request: the sample service's work does not swamp a small machine.
# An engine that kept its schedule left fewer than this share of an interval's sends
# behind. Not generator_saturated's 1%: on this project's 2-vCPU VM one pause of 5-8 ms
# puts 3 of a 250-send interval behind, and on 2026-11-27 (a quiet machine) that failed
# one or two of the three tests that checked "not saturated" in 8 of 10 runs, at any
# scheduling policy. A tenth is 60-200 ms of pause at these rates; the stall test's
# SIGSTOP (200 ms) is the generator's own saturation and crosses it.
LIGHT = "/api/profile?user=1"
KEPT_SCHEDULE = 0.1


@pytest.fixture(autouse=True)
def _engine_env(engine_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAIRLINE_ENGINE", str(engine_path))


def closed_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_constant_rate_is_kept_and_every_request_is_recorded(sample_service, tmp_path):
    """False failure: about 1e-5 (not measured): the counts, ids, schedule and HDR intervals are
    exact (an interval closes on the schedule); the achieved rate misses 2% only if more than 60
    of the 3,000 sends are written after the window ends, a pause of the pacer of 60 ms or more
    across the end of the run (it spins at nice -10; the longest pauses recorded on this machine
    are 33 to 46 ms, bench/RESULTS.md), and an error needs a request unanswered for 2 s."""
    svc = sample_service()
    plan = LoadPlan(
        targets=(("a", svc.url),),
        paths=(LIGHT,),
        rate_per_s=1000,
        duration_s=3,
        requests_path=tmp_path / "requests.bin",
        hdr_log_path=tmp_path / "latency.hlog",
    )

    result = run_load(plan)

    a = result.targets["a"]
    assert result.scheduled == 3000
    assert a.achieved_rate_per_s == pytest.approx(1000, rel=0.02)
    assert a.requests == 3000 and a.errors == 0 and a.status == {200: 3000}
    assert 0 < a.latency_us.p50 <= a.latency_us.p99 <= a.latency_us.max
    assert a.uncorrected_latency_us.p50 <= a.latency_us.p50
    assert result.endpoints == ("/api/profile",)

    records = read_requests(tmp_path / "requests.bin")
    assert len(records) == a.requests
    assert sorted(records["request_id"].tolist()) == list(range(3000))
    assert (records["status"] == 200).all() and (records["error"] == 0).all()
    # Request i is intended at i ms: the schedule is absolute, not accumulated.
    order = np.argsort(records["request_id"])
    assert (records["intended_ns"][order] == np.arange(3000) * 1_000_000).all()
    assert (records["latency_ns"] >= records["uncorrected_ns"]).all()

    log = (tmp_path / "latency.hlog").read_text().splitlines()
    intervals = [line for line in log if line.startswith("Tag=a,")]
    assert len(intervals) == 3
    for line in intervals:
        # V2 compressed (cookie 0x1c849304 | 0x10 for 8-byte words, as Java writes it),
        # length, then a deflated V2 histogram: 3 significant digits over 1 ns .. 1 h.
        blob = base64.b64decode(line.split(",")[4])
        cookie, length = struct.unpack(">iI", blob[:8])
        assert cookie == 0x1C849314 and length == len(blob) - 8
        inner = zlib.decompress(blob[8:])
        cookie, _, _, digits, lowest, highest = struct.unpack(">iiiiqq", inner[:32])
        assert (cookie, digits, lowest, highest) == (0x1C849313, 3, 1, 3_600_000_000_000)


def test_lockstep_sends_every_request_id_to_both_targets(sample_service, tmp_path):
    """False failure: estimated below 1 in 1,000: no run of 200 came within half of either bound
    (bench/engine/lockstep.py on this project's 2-vCPU VM, bench/RESULTS.md "Lockstep skew
    in the tests"). The ids and counts are exact. The engine runs on one CPU and the two
    services on the other, as the lab places them. Unpinned, the first write woke the first
    service's thread on the engine's own CPU, which then often ran before the second write:
    the skew's median was 5-80 us between runs and its p99 23-1,732 us, a spread no bound
    within ten times the skew could live with. Pinned, 100 runs alone: median 16-39 us,
    p95 23-87 us (p99 29-125 us but one run at 4,114 us: ticks of 4 ms when the engine's
    CPU went to another task between a tick's two writes); 100 runs beside a CPU-bound
    process: median 5-56 us, p95 10-172 us. So the median must stay under 120 us (the
    worst run measured: 56) and the p95 under 500 us (worst: 172). A tenfold regression
    fails: alone (the suite's alone part), the fastest run's median was 16 us, 160 us
    tenfold. Beside a neighbour the median is lower (the services' CPU is awake, so a
    write's wake-up is cheaper), and a tenfold regression there would fail only in its
    slower half."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("lockstep skew is measured with the engine and the services on CPUs apart")
    # The services' single worker thread and the engine on CPUs of their own.
    with thread_pinned_to(cpus[:-1]):
        a, b = sample_service("--threads", "1"), sample_service("--threads", "1")
    plan = LoadPlan(
        targets=(("a", a.url), ("b", b.url)),
        # No user in the query: the service derives the work from the request id, so both
        # targets do the same work for the same id.
        paths=("/api/profile",),
        rate_per_s=500,
        duration_s=2,
        requests_path=tmp_path / "requests.bin",
    )

    result = run_load(plan, cpus=cpus[-1:])

    records = read_requests(tmp_path / "requests.bin")
    ids = {
        name: sorted(records["request_id"][records["target"] == t.index].tolist())
        for name, t in result.targets.items()
    }
    assert ids["a"] == ids["b"] == list(range(1000))
    # Lockstep: each request id is due at the same instant on both targets, and is sent to
    # both close together. A send's moment is its due time plus the corrected latency less
    # the uncorrected one (the wait before the write): exactly the engine's write time.
    by_target = {}
    for t in result.targets.values():
        mine = np.sort(records[records["target"] == t.index], order="request_id")
        sent = mine["intended_ns"].astype(np.int64) + (
            mine["latency_ns"].astype(np.int64) - mine["uncorrected_ns"].astype(np.int64)
        )
        by_target[t.index] = (mine["intended_ns"], sent)
    (due_a, sent_a), (due_b, sent_b) = by_target.values()
    assert np.array_equal(due_a, due_b)
    apart_us = np.abs(sent_a - sent_b) / 1e3
    spread = np.percentile(apart_us, [50, 95, 99, 100])
    assert np.median(apart_us) < 120 and np.percentile(apart_us, 95) < 500, spread
    # The engine's own histogram of the same skew (ticks whose writes both went out at
    # once) agrees with the records.
    skew = result.dispatch_skew_us
    assert 950 <= skew.count <= 1000
    assert skew.p50 == pytest.approx(np.median(apart_us), rel=0.05, abs=2)
    served = {
        name: svc.metrics()['sample_requests_total{endpoint="/api/profile",status="200"}']
        for name, svc in (("a", a), ("b", b))
    }
    assert served == {"a": 1000, "b": 1000}


def test_pacing_error_is_measured_at_each_write(sample_service, tmp_path):
    """False failure: about 1e-4 (not measured): the percentile bounds follow from how lateness
    and skew are measured (in a tick the later write is late by at least the skew) and hold
    within the histograms' 0.1%; a send queues only if a target leaves all 32 of its
    connections unanswered for 64 ms (32 requests at 500/s), longer than the longest pauses
    recorded on this machine (33 to 46 ms, bench/RESULTS.md)."""
    # 64 KiB bodies: each write takes long enough that the target written second in a tick
    # gets its request measurably later than the first.
    body = base64.b64encode(bytes(65536)).decode()
    trace = tmp_path / "posts.jsonl"
    trace.write_text(
        '{"hairline_trace": 1}\n'
        f'{{"method": "POST", "path": "/api/profile?user=1", "body_b64": "{body}"}}\n'
    )
    a, b = sample_service(), sample_service()
    plan = LoadPlan(targets=(("a", a.url), ("b", b.url)), trace=trace, rate_per_s=500, duration_s=1)

    result = run_load(plan)

    sent = [result.targets[name] for name in ("a", "b")]
    assert [t.queued_sends for t in sent] == [0, 0]
    pacing, skew = result.pacing_error_us, result.dispatch_skew_us
    # One lateness per write, to each target: write time minus due time.
    assert pacing.count == sum(t.sent for t in sent) == 2 * result.scheduled == 1000
    # A write that came after the other target's is at least that much later than due, so
    # in every tick one of the two latenesses is at least the skew.
    assert pacing.p90 >= 0.99 * skew.p50
    assert pacing.max >= 0.99 * skew.max
    assert result.late_share == result.late_sends / pacing.count


def test_measurement_waits_until_every_target_is_warm(sample_service):
    """False failure: none in practice: the cold service turns warm 1 s after its first request
    whatever the load, and a late pacer still dispatches (and counts) every send due, so the
    warm-up sends about 200 against the bound of 150 (0.75 s at 200/s); the counts are exact,
    and the warm timeout (20 s) and the request timeout (2 s) are far beyond any pause."""
    cold = sample_service(warmup_s=1.0)
    warm = sample_service()
    plan = LoadPlan(
        targets=(("cold", cold.url), ("warm", warm.url)),
        paths=(LIGHT,),
        rate_per_s=400,
        duration_s=1,
        warmup_rate_per_s=200,
        warmup_duration_s=0.2,
        warm_urls=(f"{cold.url}/warm", f"{warm.url}/warm"),
        warm_timeout_s=20,
    )

    result = run_load(plan)

    # The cold service turns warm 1 s after its first API request, so the warm-up phase
    # lasted about a second at 200/s, well beyond its 0.2 s minimum.
    assert result.raw["warmup"]["requests"] >= 150
    assert cold.metrics()["sample_warm"] == 1
    assert result.targets["cold"].requests == 400
    assert result.targets["cold"].status == {200: 400}


def test_a_target_that_never_gets_warm_fails_naming_it(sample_service):
    """False failure: none in practice: the engine gives up after 0.1 s of warm-up and its 1 s warm
    timeout; the 10 s bound leaves more than 8 s for its start and exit."""
    never = sample_service(warmup_s=3600)
    warm = sample_service()
    plan = LoadPlan(
        targets=(("ok", warm.url), ("slowpoke", never.url)),
        paths=(LIGHT,),
        rate_per_s=100,
        duration_s=1,
        warmup_duration_s=0.1,
        warm_urls=(f"{warm.url}/warm", f"{never.url}/warm"),
        warm_timeout_s=1,
    )

    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        run_load(plan)

    assert time.monotonic() - started < 10
    assert "exit 2" in err.value.message
    assert "slowpoke" in err.value.message and "ok (" not in err.value.message


def test_a_failed_run_leaves_every_output_as_it_was(sample_service, engine_path, tmp_path):
    """False failure: none in practice: the files and counts checked are exact; each run takes
    about 1 s against its 30 s timeout."""
    never = sample_service(warmup_s=3600)
    summary, requests, hdr_log = tmp_path / "s.json", tmp_path / "r.bin", tmp_path / "h.hlog"
    summary.write_text('{"from": "the last good run"}\n')
    requests.write_bytes(b"last good records")
    plan = LoadPlan(
        targets=(("a", never.url),),
        paths=(LIGHT,),
        rate_per_s=100,
        duration_s=1,
        warm_urls=(f"{never.url}/warm",),
        warm_timeout_s=1,
        summary_path=summary,
        requests_path=requests,
        hdr_log_path=hdr_log,
    )

    failed = subprocess.run(
        [str(engine_path), *plan.to_args()], capture_output=True, text=True, timeout=30
    )

    assert failed.returncode == 2 and "never got warm" in failed.stderr
    assert summary.read_text() == '{"from": "the last good run"}\n'
    assert requests.read_bytes() == b"last good records"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.bin", "s.json"]

    ok = subprocess.run(
        [str(engine_path), *replace(plan, warm_urls=()).to_args()], capture_output=True, timeout=30
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(summary.read_text())["targets"]["a"]["requests"] == 100
    assert len(read_requests(requests)) == 100 and hdr_log.stat().st_size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.hlog", "r.bin", "s.json"]


def test_a_check_that_raises_stops_a_warm_up_that_would_wait_a_minute(sample_service):
    """What a Ray arm's lost host does to a batch: the warm-up waits for a target that will
    never be warm (60 s allowed), and the check raising after 0.5 s ends it at once.

    False failure: none in practice: the check is polled every 0.25 s, so the run ends
    0.5-0.75 s after it starts plus the engine's kill and reaping (milliseconds), against
    a 10 s bound; the engine's process is waited for before run_load returns."""
    never = sample_service(warmup_s=3600)
    started = time.monotonic()

    def host_lost() -> None:
        if time.monotonic() - started > 0.5:
            raise HostLost(0, "w2", "its node's raylet refuses connections")

    with pytest.raises(HostLost):
        warm_up(
            targets={"A": never.url},
            paths=[LIGHT],
            rate_per_s=100,
            duration_s=0.1,
            warm_urls=[f"{never.url}/warm"],
            warm_timeout_s=60,
            check=host_lost,
        )
    assert time.monotonic() - started < 10
    engines = subprocess.run(["pgrep", "-f", f"hairline-engine load --target A={never.url}"],
                             capture_output=True, text=True)  # fmt: skip
    assert engines.stdout == ""


def test_outputs_in_a_missing_folder_are_refused_before_the_run(engine_path, tmp_path):
    command = [str(engine_path), "load", "--target", "a=http://127.0.0.1:1", "--path", "/"]
    command += ["--rate", "10", "--duration", "1", "--summary", str(tmp_path / "no" / "s.json")]
    command += ["--requests", str(tmp_path)]

    proc = subprocess.run(command, capture_output=True, text=True, timeout=10)

    assert proc.returncode == 2
    assert f"the directory {tmp_path / 'no'} does not exist; create it" in proc.stderr
    assert f"--requests {tmp_path}: is a directory" in proc.stderr
    assert not (tmp_path / "no").exists()


def test_control_changes_the_rate_at_once(sample_service):
    """False failure: about 1e-3 (not measured): an interval's count moves by the rate times how
    much later the loop closed it than it opened it, so the 5% bounds at 800/s (20 of 400
    sends) need a pause of the engine of 25 ms or more across one of the three boundaries
    (1.0, 1.5, 2.0 s) and the 10% bound at 200/s one of 50 ms. The bench saw one pause of 33 ms
    in 24 s of pacing runs on a quiet machine at the default policy (bench/RESULTS.md): about
    3e-4 a boundary. The loop now spins at nice -10, which keeps other processes off it but not
    the hypervisor. The rate change has 500 ms to land in the second interval."""
    svc = sample_service()
    plan = LoadPlan(
        targets=(("a", svc.url),),
        paths=(LIGHT,),
        rate_per_s=200,
        duration_s=0,  # until stopped
        interval_ms=500,
    )

    seen = []
    with ControlledLoad(plan) as load:
        for interval in load.intervals(timeout_s=10):
            seen.append(interval)
            if len(seen) == 1:
                load.set_rate(800)
            if len(seen) == 4:
                break
        result = load.stop()

    rates = [i.targets["a"].achieved_rate_per_s for i in seen]
    assert rates[0] == pytest.approx(200, rel=0.1)
    # The change lands inside the second interval; the ones after run wholly at 800/s.
    assert rates[2] == pytest.approx(800, rel=0.05)
    assert rates[3] == pytest.approx(800, rel=0.05)
    assert result.stopped_by == "control"
    assert [c["rate_per_s"] for c in result.raw["rate_changes"]] == [800]


def test_control_intervals_say_what_was_scheduled_late_dropped_and_outstanding(sample_service):
    """False failure: about 1e-3, from 5 runs of the three tests after the change (0 failures)
    and 10 before it (1-2 of 3 failed in 8): an engine that kept its schedule must leave
    fewer than a tenth of an interval's sends behind (KEPT_SCHEDULE), which only a pause of
    60-200 ms at these rates crosses; the pauses seen on this VM were 5-8 ms (3 sends) and,
    once in 24 s of pacing runs, 33 ms (bench/RESULTS.md)."""
    a, b = sample_service(), sample_service()
    plan = LoadPlan(
        targets=(("a", a.url), ("b", b.url)),
        paths=(LIGHT,),
        rate_per_s=400,
        duration_s=0,
        interval_ms=500,
    )
    seen = []
    with ControlledLoad(plan) as load:
        for interval in load.intervals(timeout_s=10):
            seen.append(interval)
            if len(seen) == 3:
                break
        load.stop()

    for interval in seen[1:]:
        # A lockstep send to two targets is scheduled once.
        assert interval.scheduled == pytest.approx(200, abs=2)
        # Kept its schedule: a VM's pause leaves a few sends behind, never a tenth.
        assert interval.dropped == 0 and interval.behind < KEPT_SCHEDULE * interval.scheduled
        assert 0 <= interval.in_flight <= 2 * plan.connections
        for t in interval.targets.values():
            assert t.p99_us <= t.p999_us <= t.max_us


def test_drops_at_a_saturated_service_are_not_the_generators_saturation(sample_service):
    """False failure: about 1e-3, from 5 runs of the three tests after the change (0 failures)
    and 10 before it (1-2 of 3 failed in 8): an engine that kept its schedule must leave
    fewer than a tenth of an interval's sends behind (KEPT_SCHEDULE), which only a pause of
    60-200 ms at these rates crosses; the pauses seen on this VM were 5-8 ms (3 sends) and,
    once in 24 s of pacing runs, 33 ms (bench/RESULTS.md)."""
    # One worker at ~1.7 ms a request (~580/s), and the engine allowed one request in
    # flight: much of 1,500/s is dropped by the engine, not answered slowly by the service.
    # The engine kept its schedule, so a capacity search must blame the service.
    svc = sample_service("--threads", "1", "--work", "sleep", "--regress-cpu", "40")
    plan = LoadPlan(
        targets=(("a", svc.url),),
        paths=(LIGHT,),
        rate_per_s=1500,
        duration_s=0,
        interval_ms=500,
        max_in_flight=1,
    )
    with ControlledLoad(plan) as load:
        interval = next(iter(load.intervals(timeout_s=10)))
        load.stop()

    assert interval.dropped > 0 and interval.behind < KEPT_SCHEDULE * interval.scheduled
    assert interval.in_flight <= 1
    assert interval.targets["a"].sent + interval.dropped == pytest.approx(interval.scheduled, abs=1)


def test_an_engine_that_stalls_is_behind_its_schedule(sample_service):
    """False failure: about 1e-3, from 5 runs of the three tests after the change (0 failures)
    and 10 before it (1-2 of 3 failed in 8): an engine that kept its schedule must leave
    fewer than a tenth of an interval's sends behind (KEPT_SCHEDULE), which only a pause of
    60-200 ms at these rates crosses; the pauses seen on this VM were 5-8 ms (3 sends) and,
    once in 24 s of pacing runs, 33 ms (bench/RESULTS.md). The stall's half is certain: the
    200 ms stop leaves about 100 sends over 1 ms late, dispatched in the turn after SIGCONT,
    within the next two intervals."""
    # SIGSTOP freezes the engine's pacer for 200 ms: every send due meanwhile leaves late,
    # which is the generator's own saturation (a VM's pause looks the same).
    svc = sample_service()
    plan = LoadPlan(
        targets=(("a", svc.url),), paths=(LIGHT,), rate_per_s=500, duration_s=0, interval_ms=500
    )
    with ControlledLoad(plan) as load:
        intervals = iter(load.intervals(timeout_s=10))
        first = next(intervals)
        os.kill(load.pid, signal.SIGSTOP)
        time.sleep(0.2)
        os.kill(load.pid, signal.SIGCONT)
        stalled = [next(intervals) for _ in range(2)]
        load.stop()

    assert first.behind < KEPT_SCHEDULE * first.scheduled
    assert any(i.behind >= 50 and i.generator_saturated for i in stalled)


def test_a_stall_shows_in_corrected_latency_only(sample_service, engine_path, tmp_path):
    """False failure: about 1e-5 (not measured): the service is stopped for at least 0.5 s (a
    sleep is never short) 1.5 s into the 4 s run, so some 200 of the 8,000 requests wait 400 ms
    or more where p99.9 needs 8; only the 4 requests on the wire see the stall in uncorrected
    latency, and 8 would need another stall of the service of 100 ms, beyond the longest pauses
    recorded on this machine (33 to 46 ms). The benchmark's same stall read 491 ms corrected
    and 1.23 ms uncorrected (bench/RESULTS.md)."""
    svc = sample_service()
    summary = tmp_path / "summary.json"
    plan = LoadPlan(
        targets=(("a", svc.url),),
        paths=("/healthz",),
        rate_per_s=2000,
        duration_s=4,
        # Few connections: only the requests already on the wire when the target stops see
        # the stall from their actual send; everything after waits in the engine's queue.
        connections=4,
        summary_path=summary,
    )
    engine = subprocess.Popen([str(engine_path), *plan.to_args()], stderr=subprocess.PIPE)
    try:
        time.sleep(1.5)
        os.kill(svc.pid, signal.SIGSTOP)
        time.sleep(0.5)
    finally:
        os.kill(svc.pid, signal.SIGCONT)
    _, stderr = engine.communicate(timeout=20)
    assert engine.returncode == 0, stderr.decode()

    a = json.loads(summary.read_text())["targets"]["a"]
    assert a["errors"] == 0
    assert a["latency_us"]["p999"] >= 400_000
    assert a["uncorrected_latency_us"]["p999"] < 100_000


def test_a_closed_port_is_counted_as_connect_refused_without_hanging(sample_service):
    """False failure: none in practice: the errors and gates are exact (nothing listens, so every
    connect is refused at once), and the run takes about 1 s against a bound of 5 s."""
    svc = sample_service()
    dead = f"http://127.0.0.1:{closed_port()}"
    plan = LoadPlan(
        targets=(("live", svc.url), ("dead", dead)),
        paths=(LIGHT,),
        rate_per_s=200,
        duration_s=1,
    )

    started = time.monotonic()
    result = run_load(plan)

    assert time.monotonic() - started < 1 + plan.timeout_ms / 1000 + 2
    d = result.targets["dead"]
    assert d.requests == 200 and d.errors == 200
    assert d.errors_by_kind == {"connect_refused": 200}
    assert result.targets["live"].errors == 0
    assert not result.valid
    assert not next(g for g in result.gates if g.name == "rate").passed


def test_sigint_ends_the_run_and_still_writes_the_summary(sample_service, engine_path, tmp_path):
    """False failure: none in practice: the engine measures from its start (no warm-up) and the
    signal comes 1 s later, so the run measures about 1 s against bounds of 0.5 and 5 s, and
    about 200 requests against 50."""
    svc = sample_service()
    plan = LoadPlan(
        targets=(("a", svc.url),),
        paths=(LIGHT,),
        rate_per_s=200,
        duration_s=60,
        summary_path=tmp_path / "summary.json",
        requests_path=tmp_path / "requests.bin",
    )
    engine = subprocess.Popen([str(engine_path), *plan.to_args()], stderr=subprocess.PIPE)
    time.sleep(1.0)
    engine.send_signal(signal.SIGINT)
    _, stderr = engine.communicate(timeout=10)

    assert engine.returncode == 0, stderr.decode()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["stopped_by"] == "signal"
    assert 0.5 < summary["duration_s"] < 5
    requests = summary["targets"]["a"]["requests"]
    assert requests > 50
    assert len(read_requests(tmp_path / "requests.bin")) == requests


def test_a_rate_or_duration_that_cannot_be_scheduled_is_refused_at_once(engine_path):
    command = [str(engine_path), "load", "--target", "a=http://127.0.0.1:1", "--path", "/"]
    command += ["--rate", "1e12", "--duration", "1e12", "--warmup-rate", "2e6"]
    proc = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=10,
    )

    assert proc.returncode == 2
    assert "--rate 1000000000000: the engine schedules at most 1000000 requests" in proc.stderr
    assert "--warmup-rate 2000000: the engine schedules at most 1000000" in proc.stderr
    assert "--duration 1000000000000: at most 604800 seconds" in proc.stderr


def test_sigterm_at_a_rate_the_target_cannot_take_ends_the_run_within_a_second(
    sample_service, engine_path, tmp_path
):
    """False failure: about 1e-4 (not measured): after a signal the drain is cut at 500 ms and the
    loop looks at signals at least every 256 sends (docs/engine.md), which leaves 0.7 s of the
    1.2 s bound for the signal's turn, the summary and the exit, against pauses of 33 to 46 ms
    at the longest recorded on this machine (bench/RESULTS.md); how long it takes is not
    recorded. At 1,000,000/s with 10,000 requests in flight, drops and cancels are certain."""
    # The heaviest endpoint at the highest rate: the engine is far ahead of the service, with
    # thousands of requests outstanding when the signal comes.
    svc = sample_service()
    summary = tmp_path / "summary.json"
    command = [str(engine_path), "load", "--target", f"a={svc.url}", "--path", "/api/feed"]
    command += ["--rate", "1000000", "--duration", "60", "--summary", str(summary)]
    engine = subprocess.Popen(command, stderr=subprocess.PIPE)
    time.sleep(1.0)

    signalled = time.monotonic()
    engine.send_signal(signal.SIGTERM)
    _, stderr = engine.communicate(timeout=20)
    took_s = time.monotonic() - signalled

    assert engine.returncode == 0, stderr.decode()
    assert took_s < 1.2
    result = json.loads(summary.read_text())
    assert result["stopped_by"] == "signal" and not result["valid"]
    a = result["targets"]["a"]
    assert a["requests"] > 0 and a["dropped"] > 0
    # What was still outstanding when the drain was cut short was cancelled, not timed out.
    assert a["errors_by_kind"].get("cancelled", 0) > 0


def test_a_bad_trace_line_is_named(tmp_path, sample_service):
    svc = sample_service()
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"hairline_trace": 1}\n{"path": "/api/feed?user=1"}\n{"method": "GET", "headers": {}}\n'
    )
    plan = LoadPlan(targets=(("a", svc.url),), trace=trace, rate_per_s=10, duration_s=1)

    with pytest.raises(EngineError) as err:
        run_load(plan)

    assert f"{trace}:3: path: missing" in err.value.message


def test_without_the_spin_the_schedule_is_still_kept(sample_service):
    """False failure: about 1e-4 (not measured): the count is exact; the achieved rate misses 2%
    only if more than 20 of the 1,000 sends are written after the window ends, a pause of the
    loop of 40 ms or more across the end of the run. Sleeping on the timer, the loop runs at
    SCHED_FIFO, so no other process delays it; the hypervisor can, and the longest pauses
    recorded on this machine are 33 to 46 ms (bench/RESULTS.md)."""
    # The lab's setting when the engine shares a CPU with an arm: sleep on the timer only,
    # sends due within 150 µs of a wake-up going out on it (lab/runner.py).
    svc = sample_service()
    plan = LoadPlan(
        targets=(("a", svc.url),), paths=(LIGHT,), rate_per_s=500, duration_s=2, spin_us=0,
        coalesce_us=150,
    )  # fmt: skip
    result = run_load(plan)
    assert (result.raw["spin_us"], result.raw["coalesce_us"]) == (0, 150)
    assert result.targets["a"].achieved_rate_per_s == pytest.approx(500, rel=0.02)
    assert result.targets["a"].requests == 1000


def test_bad_arguments_exit_2_with_every_problem(engine_path):
    proc = subprocess.run(
        [
            str(engine_path),
            "load",
            "--target",
            "nourl",
            "--path",
            "x",
            "--duration=-1",
            "--spin-us",
            "2000000",
            "--coalesce-us",
            "1001",
        ],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert proc.returncode == 2
    assert "--target nourl: expected NAME=URL" in proc.stderr
    assert "--path" in proc.stderr and "--rate is required" in proc.stderr
    assert "--duration -1" in proc.stderr
    assert "--spin-us 2000000: expected 0 to 1000000" in proc.stderr
    assert "--coalesce-us 1001: expected 0 to 1000" in proc.stderr


def test_find_engine_prefers_the_environment(engine_path):
    assert find_engine() == engine_path


def test_warm_up_then_measure_then_rows_for_the_lab(sample_service, tmp_path):
    """False failure: none in practice: the counts and the rows' times (intended send times, from
    the schedule) are exact; the cold arm warms 0.5 s after its first request against a 20 s
    timeout, and a row is missing only for a request unanswered for 2 s."""
    cold = sample_service(warmup_s=0.5)
    plain = sample_service()
    targets = {"A": cold.url, "B": plain.url}

    # Only the cold arm has a warm URL; it is matched to its target by its prefix.
    warm_up(
        targets=targets,
        paths=[LIGHT],
        rate_per_s=200,
        duration_s=0.1,
        warm_urls=[f"{cold.url}/warm"],
        warm_timeout_s=20,
    )
    assert cold.metrics()["sample_warm"] == 1

    result = measure(
        targets=targets,
        paths=[LIGHT],
        rate_per_s=300,
        duration_s=1,
        requests_path=tmp_path / "r.bin",
    )
    rows = latency_rows(result, trial=3, batch=1, host_of={"A": 0, "B": 1})

    assert rows.num_rows == result.targets["A"].requests + result.targets["B"].requests == 600
    assert set(rows.column("arm").to_pylist()) == {"A", "B"}
    assert set(rows.column("metric").to_pylist()) == {"latency_us"}
    assert set(rows.column("endpoint").to_pylist()) == {"/api/profile"}
    by_arm = dict(zip(rows.column("arm").to_pylist(), rows.column("host").to_pylist(), strict=True))
    assert by_arm == {"A": 0, "B": 1}
    assert max(rows.column("t").to_pylist()) < 1.0
