"""The sample service's op endpoints, code cache and stall knob, over real HTTP on loopback."""

from __future__ import annotations

import http.client
import json
import re
import subprocess
from pathlib import Path

import pytest

from hairline.engine import LoadPlan, run_load
from suitekit import SampleService, StartSampleService

FOLDED_LINE = re.compile(r"^(/api/op/\d+);(op_(?:g\d+_f\d\d|common_\d)) (\d+)$")


def get_all(svc: SampleService, paths: list[str]) -> None:
    """GETs the paths one after another on one keep-alive connection, expecting 200s."""
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=10)
    try:
        for path in paths:
            conn.request("GET", path)
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, f"{path}: {resp.status} {body!r}"
    finally:
        conn.close()


def miss_rate(svc: SampleService) -> float:
    metrics = svc.metrics()
    return metrics["sample_code_cache_misses_total"] / metrics["sample_code_cache_lookups_total"]


def test_an_instance_given_one_groups_ops_misses_far_less_than_one_given_all(
    sample_service: StartSampleService,
) -> None:
    flags = ("--threads", "1", "--work", "sleep", "--ops", "16", "--code-cache", "16")
    routed, mixed = sample_service(*flags), sample_service(*flags)
    # Group 0 of 4 is ops 0, 4, 8, 12: 12 functions of its own and 2 common ones fit in 16.
    get_all(routed, [f"/api/op/{4 * (i % 4)}" for i in range(200)])
    get_all(mixed, [f"/api/op/{i % 16}" for i in range(200)])
    assert miss_rate(routed) < 0.02 < 0.3 < miss_rate(mixed)
    # Each miss costs --miss-units (40) more work: the mixed instance does far more per op.
    units = [svc.metrics()["sample_cpu_work_units_total"] for svc in (routed, mixed)]
    assert units[1] > 1.5 * units[0], units


def test_debug_profile_lists_each_op_with_its_groups_functions(
    sample_service: StartSampleService,
) -> None:
    svc = sample_service("--ops", "8", "--op-groups", "2", "--code-cache", "4")
    get_all(svc, [f"/api/op/{k}" for k in range(6)])
    conn = http.client.HTTPConnection(svc.host, svc.port, timeout=10)
    conn.request("GET", "/debug/profile")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/plain")
    profile = resp.read().decode()
    conn.close()
    functions: dict[str, set[str]] = {}
    for line in profile.splitlines():
        match = FOLDED_LINE.match(line)
        assert match, line
        functions.setdefault(match[1], set()).add(match[2])
        assert int(match[3]) > 0
    # Only the ops that ran; each with the 2 common functions and 8 of its group's 12.
    assert sorted(functions) == [f"/api/op/{k}" for k in range(6)]
    for op, names in functions.items():
        group = int(op.rsplit("/", 1)[1]) % 2
        assert {"op_common_0", "op_common_1"} <= names
        own = names - {"op_common_0", "op_common_1"}
        assert len(own) == 8 and all(n.startswith(f"op_g{group}_f") for n in own), names


def test_ops_beyond_the_flag_are_not_found(sample_service: StartSampleService) -> None:
    plain, with_ops = sample_service(), sample_service("--ops", "4")
    assert plain.get("/api/op/0")[0] == 404
    assert plain.get("/debug/profile") == (200, "")
    status, body = with_ops.get("/api/op/3")
    assert status == 200 and json.loads(body)["endpoint"] == "/api/op/3"
    for path in ("/api/op/4", "/api/op/03", "/api/op/x"):
        assert with_ops.get(path)[0] == 404, path
    metrics = with_ops.metrics()
    assert metrics['sample_requests_total{endpoint="/api/op",status="200"}'] == 1
    assert metrics["sample_code_cache_lookups_total"] == 0  # no --code-cache


def test_a_stall_moves_the_tail_and_leaves_the_median(
    sample_service: StartSampleService, engine_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """False failure: about 1e-3 (not measured). The stall count is exact (a given
    --stall-seed stalls fixed request ids); the p99.9 gap (a 30 ms stall against the bound of
    20 ms) and the p50 within 15% need both services to see the same machine, and one pause of
    the base service of 10 ms or more in its top 0.1% moves the first (the longest pauses
    recorded on this machine are 33 to 46 ms, bench/RESULTS.md)."""
    monkeypatch.setenv("HAIRLINE_ENGINE", str(engine_path))
    flags = ("--threads", "2", "--work", "sleep")
    base = sample_service(*flags)
    stalled = sample_service(
        *flags, "--stall-every", "100", "--stall-ms", "30", "--stall-seed", "1"
    )
    # Lockstep and a given seed: the engine's request ids are the same every run, so with
    # --stall-seed the stalls fall on the same requests of every run; one user, so every
    # request does the same work.
    result = run_load(
        LoadPlan(
            targets=(("base", base.url), ("stalled", stalled.url)),
            paths=("/api/profile?user=1",),
            rate_per_s=500,
            duration_s=1.5,
            spin_us=0,
        )
    )
    a, b = result.targets["base"].latency_us, result.targets["stalled"].latency_us
    assert b.p999 > a.p999 + 20_000, (a, b)
    assert b.p50 == pytest.approx(a.p50, rel=0.15), (a, b)
    stalls = stalled.metrics()["sample_stalls_total"]
    # About 750 / 100. With a given seed the count is fixed (17 for seed 1); 1 to 18 is the
    # binomial band of 750 requests at 1 in 100 that all but 1 in 1,000 seeds fall in.
    assert 1 <= stalls <= 18, stalls
    assert stalled.metrics()["sample_stall_seed"] == 1


def test_each_start_draws_its_own_stall_seed(sample_service: StartSampleService) -> None:
    """Without --stall-seed each start stalls other requests of a replayed trace, so runs
    differ as real pauses do; the drawn seed is printed and exported, and repeats them.

    False failure: 1 in 2**32, two draws of a 32-bit seed being equal."""
    stall = ("--stall-every", "400", "--stall-ms", "10")
    first, second = sample_service(*stall), sample_service(*stall)
    seeds = [s.metrics()["sample_stall_seed"] for s in (first, second)]
    assert seeds[0] != seeds[1], seeds
    assert f"seed {int(seeds[0])} (--stall-seed {int(seeds[0])}" in first.stderr_text()
    again = sample_service(*stall, "--stall-seed", str(int(seeds[0])))
    assert again.metrics()["sample_stall_seed"] == seeds[0]
    assert "sample_stall_seed" not in sample_service().metrics()


def test_sample_trace_of_ops_is_zipf_in_the_op(engine_path: Path, tmp_path: Path) -> None:
    """False failure: none: sample-trace is seeded (its default seed). Zipf 1.5 over 8 ops makes op
    0 about 23 times as frequent as op 7, against the bound of 4."""
    out = tmp_path / "ops.jsonl"
    command = [str(engine_path), "sample-trace", "--requests", "2000", "--ops", "8"]
    subprocess.run([*command, "--op-zipf", "1.5", "-o", str(out)], check=True, timeout=10)
    header, *lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert header["ops"] == 8 and header["op_zipf"] == 1.5
    paths = [r["path"] for r in lines]
    assert all(r["endpoint"] == r["path"] for r in lines)
    assert set(paths) <= {f"/api/op/{k}" for k in range(8)}
    assert paths.count("/api/op/0") > 4 * paths.count("/api/op/7")
    refused = subprocess.run([*command, "--op-zipf", "-1", "-o", str(out)], capture_output=True)
    assert refused.returncode == 2 and b"--op-zipf -1" in refused.stderr
