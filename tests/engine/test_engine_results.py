"""``hairline.engine.results``: the engine's JSON as typed values (no engine run here)."""

from __future__ import annotations

import math

from hairline.engine.results import IntervalStats


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
