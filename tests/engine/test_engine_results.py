"""``hairline.engine.results``: the engine's JSON as typed values (no engine run here)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from hairline.engine.results import SUMMARY_VERSION, IntervalStats, LoadResult
from hairline.errors import EngineError

ROOT = Path(__file__).resolve().parents[2]


def target_json(**latencies_us: float | None) -> dict[str, object]:
    return {
        "requests": 100,
        "errors": 0,
        "sent": 100,
        "achieved_rate_per_s": 200.0,
        "p50_us": 150.0,
        "p99_us": 900.0,
        **latencies_us,
    }


def interval_line(targets: dict[str, object] | None = None, **top: object) -> dict[str, object]:
    return {
        "start_s": 0.0,
        "end_s": 0.5,
        "rate_per_s": 200.0,
        "targets": targets or {"a": target_json()},
        **top,
    }


def test_an_older_engines_interval_line_still_parses_with_defaults() -> None:
    interval = IntervalStats.from_json(interval_line())
    assert (interval.scheduled, interval.late_sends, interval.dropped, interval.in_flight) == (
        0,
        0,
        0,
        0,
    )
    assert math.isnan(interval.targets["a"].p999_us) and math.isnan(interval.targets["a"].max_us)
    assert not interval.generator_saturated


def test_the_new_fields_are_read_and_null_latencies_are_nan() -> None:
    line = interval_line(
        {
            "a": target_json(p999_us=2500.0, max_us=4100.0),
            "b": target_json(p50_us=None, p99_us=None, p999_us=None, max_us=None),
        },
        scheduled=100,
        late_sends=1,
        dropped=0,
        in_flight=7,
        behind=2,
    )
    interval = IntervalStats.from_json(line)
    assert (interval.scheduled, interval.late_sends, interval.in_flight) == (100, 1, 7)
    assert interval.behind == 2
    assert (interval.targets["a"].p999_us, interval.targets["a"].max_us) == (2500.0, 4100.0)
    assert math.isnan(interval.targets["b"].max_us)


def test_the_generator_is_saturated_when_its_pacer_is_behind_on_over_one_percent() -> None:
    def saturated(**top: int) -> bool:
        return IntervalStats.from_json(interval_line(**top)).generator_saturated

    assert not saturated(scheduled=1000, behind=10)  # exactly 1%: still fine
    assert saturated(scheduled=1000, behind=11)
    # Late writes and drops are what a saturated service causes (its queue holds the
    # connections), with the engine on time: no saturation of the generator.
    assert not saturated(scheduled=1000, late_sends=300, dropped=50, behind=0)
    # Nothing scheduled (a paused rate) and nothing behind is not saturation.
    assert not saturated(scheduled=0, behind=0)


def summary_json(**overrides: object) -> dict[str, object]:
    latency = {"count": 2, "mean": 2.0, "p50": 1.0, "p90": 2.0, "p99": 3.0, "p999": 3.0, "max": 3.0}
    empty = dict.fromkeys(latency, None) | {"count": 0}
    data: dict[str, object] = {
        "hairline_load_summary": SUMMARY_VERSION,
        "target_names": ["a"],
        "endpoints": ["/x"],
        "targets": {
            "a": {
                "index": 0,
                "url": "http://h:1",
                "requests": 2,
                "errors": 0,
                "sent": 2,
                "dropped": 0,
                "queued_sends": 0,
                "bytes": 10,
                "achieved_rate_per_s": 2.0,
                "latency_us": latency,
                "uncorrected_latency_us": latency,
                "status": {"200": 2},
                "errors_by_kind": {},
                "endpoints": {
                    "/x": {
                        "requests": 2,
                        "errors": 0,
                        "latency_us": latency,
                        "uncorrected_latency_us": latency,
                    }
                },
            }
        },
        "valid": True,
        "gates": [{"name": "rate", "value": 0.0, "limit": 0.01, "passed": True, "detail": ""}],
        "scheduled": 2,
        "scheduled_rate_per_s": 2.0,
        "duration_s": 1.0,
        "late_sends": 0,
        "late_share": 0.0,
        "dropped": 0,
        "dispatch_skew_us": empty,
        "pacing_error_us": latency,
        "stopped_by": "duration",
        "intervals": [],
    }
    data.update(overrides)
    return data


def test_summary_json_becomes_typed_results():
    result = LoadResult.from_json(summary_json())
    a = result.targets["a"]
    assert a.status == {200: 2} and a.latency_us.p99 == 3.0
    assert a.endpoints["/x"].latency_us.max == 3.0
    assert math.isnan(result.dispatch_skew_us.p50) and result.dispatch_skew_us.count == 0
    assert result.gates[0].passed


def test_a_summary_missing_a_field_is_an_engine_error():
    broken = summary_json()
    del broken["targets"]
    with pytest.raises(EngineError, match="targets"):
        LoadResult.from_json(broken)


def test_summary_fixture_is_json_serialisable():
    # Guards the fixture above against drifting into something the engine cannot emit.
    assert json.loads(json.dumps(summary_json()))["valid"] is True


@pytest.mark.parametrize(
    ("version", "said"),
    [(SUMMARY_VERSION + 1, f"version {SUMMARY_VERSION + 1}"), (None, "no version")],
)
def test_a_summary_of_another_version_says_to_rebuild_the_engine(
    version: int | None, said: str
) -> None:
    """An engine built from other sources writes another summary format (or, from before
    the format had a version, none): the error says which and how to get a matching one,
    before any field is read."""
    data = summary_json(hairline_load_summary=version)
    if version is None:
        del data["hairline_load_summary"]
    with pytest.raises(EngineError) as err:
        LoadResult.from_json(data)
    assert said in err.value.message and f"reads version {SUMMARY_VERSION}" in err.value.message
    assert err.value.hint is not None and "make build" in err.value.hint


def test_the_version_read_is_the_one_the_engine_writes() -> None:
    """Python's SUMMARY_VERSION and the engine's (engine/src/load/summary.rs) change together."""
    source = (ROOT / "engine" / "src" / "load" / "summary.rs").read_text()
    found = re.search(r"pub const SUMMARY_VERSION: u32 = (\d+);", source)
    assert found is not None and int(found.group(1)) == SUMMARY_VERSION
