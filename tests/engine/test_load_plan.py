"""The Python face of the engine without running it: plans, flags, records."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hairline.engine import (
    REQUEST_DTYPE,
    LoadPlan,
    check_plan,
    find_engine,
    read_requests,
    run_load,
)
from hairline.errors import ConfigError, DataError, EngineError


def test_a_plan_becomes_the_documented_flags():
    plan = LoadPlan(
        targets={"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"},
        paths="/api/feed?user=1",
        rate_per_s=1500,
        duration_s=2.5,
        arrival="poisson",
        warm_urls=("http://127.0.0.1:1/warm", "http://127.0.0.1:2/warm"),
        set_headers=(("b", "x-shard", "3"),),
        hosts=(("b", "canary"),),
        coalesce_us=150,
        strict=True,
    )
    args = plan.to_args(control=True)

    assert plan.targets == (("a", "http://127.0.0.1:1"), ("b", "http://127.0.0.1:2"))
    assert args[:5] == [
        "load",
        "--target",
        "a=http://127.0.0.1:1",
        "--target",
        "b=http://127.0.0.1:2",
    ]
    pairs = dict(zip(args[1::2], args[2::2], strict=False))
    assert pairs["--rate"] == "1500" and pairs["--duration"] == "2.5"
    assert pairs["--arrival"] == "poisson"
    assert "--set-header" in args and "b:x-shard=3" in args
    assert "--host" in args and "b=canary" in args
    assert args.count("--warm-url") == 2
    assert pairs["--coalesce-us"] == "150"
    # Off (the default), the flag is left out: an engine built before it still runs the plan.
    assert (
        "--coalesce-us" not in LoadPlan(targets={"a": "http://127.0.0.1:1"}, duration_s=1).to_args()
    )
    assert "--strict" in args and args[-1] == "--control"


def test_a_bad_plan_is_refused_by_the_engine_with_every_problem_at_once(engine_path: Path):
    # The rules live in the engine; Python asks it (`load --check`) rather than repeat them.
    plan = LoadPlan(
        targets=(("a", "http://127.0.0.1:8"), ("a", "http://127.0.0.1:9"), ("b", "https://x")),
        paths=("/",),
        duration_s=-1,
        rate_per_s=0,
        warm_urls=("http://y/warm",),
    )
    with pytest.raises(ConfigError) as err:
        check_plan(plan, engine=engine_path)
    message = err.value.message
    for flag in ("--target b=https://x", "used twice", "--rate 0", "--duration -1", "--warm-url"):
        assert flag in message, (flag, message)
    assert err.value.hint


def test_a_plan_beyond_the_engines_limits_is_refused_before_it_runs(engine_path: Path):
    plan = LoadPlan(
        targets=(("a", "http://127.0.0.1:9"),),
        paths=("/",),
        rate_per_s=1e12,
        duration_s=1e12,
        timeout_ms=10**12,
    )
    with pytest.raises(ConfigError) as err:
        check_plan(plan, engine=engine_path)
    message = err.value.message
    assert "--rate 1000000000000: the engine schedules at most 1000000 requests" in message
    assert "--duration 1000000000000: at most 604800 seconds" in message
    assert "--timeout-ms 1000000000000" in message


def test_a_good_plan_passes_the_check_and_nothing_is_sent(engine_path: Path, tmp_path: Path):
    # Port 9 on loopback has no listener: a check that sent anything would fail to connect.
    plan = LoadPlan(
        targets=(("a", "http://127.0.0.1:9"),),
        paths=("/",),
        rate_per_s=1000,
        duration_s=1,
        summary_path=tmp_path / "summary.json",
    )
    check_plan(plan, engine=engine_path)
    assert not (tmp_path / "summary.json").exists()


def test_a_refused_run_is_a_config_error_not_an_engine_failure(engine_path: Path):
    plan = LoadPlan(targets=(("a", "http://127.0.0.1:9"),), paths=("/",), rate_per_s=0,
                    duration_s=1)  # fmt: skip
    with pytest.raises(ConfigError, match="--rate"):
        run_load(plan, engine=engine_path)


def test_find_engine_explains_a_wrong_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("HAIRLINE_ENGINE", str(tmp_path / "missing"))
    with pytest.raises(EngineError) as err:
        find_engine()
    assert "HAIRLINE_ENGINE" in err.value.message and err.value.hint


def write_records(path: Path, records: np.ndarray, *, magic: bytes = b"HLREQS\0\0") -> Path:
    header = magic + (1).to_bytes(4, "little") + (48).to_bytes(4, "little")
    path.write_bytes(header + records.tobytes())
    return path


def test_request_records_are_read_in_one_call(tmp_path):
    records = np.zeros(3, dtype=REQUEST_DTYPE)
    records["request_id"] = [0, 1, 2]
    records["status"] = 200
    records["latency_ns"] = [10, 20, 30]
    got = read_requests(write_records(tmp_path / "r.bin", records))
    assert REQUEST_DTYPE.itemsize == 48
    assert got["request_id"].tolist() == [0, 1, 2]
    assert got["latency_ns"].sum() == 60


def test_request_records_reject_foreign_and_truncated_files(tmp_path):
    records = np.zeros(2, dtype=REQUEST_DTYPE)
    with pytest.raises(DataError, match="bad magic"):
        read_requests(write_records(tmp_path / "x.bin", records, magic=b"NOTMINE!"))
    truncated = write_records(tmp_path / "t.bin", records)
    truncated.write_bytes(truncated.read_bytes()[:-5])
    with pytest.raises(DataError, match="truncated"):
        read_requests(truncated)
