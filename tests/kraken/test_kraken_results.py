"""The arithmetic on what a Kraken test measured: served rates and the latency breakdown
from counters, capacity by queueing delay, measured capacity and the bottleneck."""

from __future__ import annotations

import math

import pytest

from hairline.collect.prometheus import parse_text
from hairline.kraken.results import (
    Breakdown,
    Counters,
    ServerReading,
    Step,
    breakdown_of,
    counters_of,
    find_bottleneck,
    measured_capacity,
    queue_crossing,
    server_capacity,
    stamping_of,
)

SCRAPE = """\
sample_requests_total{endpoint="/api/feed",status="200"} 100
sample_requests_total{endpoint="/api/search",status="200"} 50
sample_requests_total{endpoint="/api/feed",status="503"} 7
sample_requests_total{endpoint="/metrics",status="200"} 9
sample_queue_seconds_sum 0.3
sample_queue_seconds_count 150
sample_work_seconds_sum 0.15
sample_work_seconds_count 150
sample_cache_wait_seconds_sum 0.45
sample_cache_wait_seconds_count 150
"""


def counters(served: float, queue_s: float, work_s: float, cache_s: float, n: float) -> Counters:
    return Counters(
        served=served,
        sums_s={"queue": queue_s, "work": work_s, "cache": cache_s},
        counts={"queue": n, "work": n, "cache": n},
    )


def test_counters_are_api_answers_and_the_three_histograms() -> None:
    c = counters_of(parse_text(SCRAPE))
    assert c.served == 150  # 503s and /metrics scrapes are not served API requests
    assert c.sums_s == {"queue": 0.3, "work": 0.15, "cache": 0.45}
    assert c.counts == {"queue": 150, "work": 150, "cache": 150}


def test_a_group_breakdown_weighs_servers_by_their_requests() -> None:
    before = [counters(0, 0, 0, 0, 0), counters(0, 0, 0, 0, 0)]
    after = [counters(300, 0.3, 0.3, 0.3, 300), counters(100, 0.5, 0.1, 0.1, 100)]
    served, b = breakdown_of(before, after, elapsed_s=0.5)
    assert served == 800
    assert b == Breakdown(queue_ms=2.0, work_ms=1.0, cache_ms=1.0)


def test_no_requests_is_no_breakdown_and_no_cache_is_zero_wait() -> None:
    same = [counters(5, 1, 1, 0, 5)]
    assert breakdown_of(same, same, elapsed_s=1.0) == (0.0, None)
    no_cache = Counters(
        10, {"queue": 0.01, "work": 0.02, "cache": 0}, {"queue": 10, "work": 10, "cache": 0}
    )
    _, b = breakdown_of([counters(0, 0, 0, 0, 0)], [no_cache], elapsed_s=1.0)
    assert b == Breakdown(queue_ms=1.0, work_ms=2.0, cache_ms=0.0)


def test_capacity_by_queueing_delay_is_interpolated_where_it_crosses_the_limit() -> None:
    points = [ServerReading(100, 0.1), ServerReading(300, 5.0), ServerReading(500, 45.0)]
    # 20 ms lies 15/40 of the way from 5 ms to 45 ms: 300 + 0.375 * 200.
    assert queue_crossing(points, 20.0) == pytest.approx(375.0)
    assert queue_crossing(points[:2], 20.0) is None
    assert queue_crossing([ServerReading(None, None), *points[2:]], 20.0) == 500


def test_requests_without_a_kernel_receive_timestamp_are_read_beside_the_queue_histogram() -> None:
    c = counters_of(parse_text(SCRAPE + "sample_queue_unstamped_total 3\n"))
    assert c.unstamped == 3
    # A service that does not count them says nothing, which is not zero.
    assert counters_of(parse_text(SCRAPE)).unstamped is None


def test_stamping_between_two_scrapes_is_the_difference_of_the_counts() -> None:
    before = counters_of(parse_text(SCRAPE + "sample_queue_unstamped_total 3\n"))
    after = counters_of(
        parse_text(
            SCRAPE.replace("sample_queue_seconds_count 150", "sample_queue_seconds_count 450")
            + "sample_queue_unstamped_total 303\n"
        )
    )
    assert stamping_of(before, after) == (300, 300)
    # A restarted service's counters went back: nothing is known of the interval.
    assert stamping_of(after, before) == (None, None)
    assert stamping_of(counters_of(parse_text(SCRAPE)), after) == (300, None)


def test_a_capacity_is_refused_when_over_1_percent_of_requests_had_no_kernel_stamp() -> None:
    def readings(unstamped: float | None) -> list[ServerReading]:
        # 20 ms of queueing is crossed at 375/s, as in the interpolation test above.
        return [
            ServerReading(100, 0.1, 500, unstamped),
            ServerReading(300, 5.0, 1500, 0 if unstamped is not None else None),
            ServerReading(500, 45.0, 2500, 0 if unstamped is not None else None),
        ]

    measured = server_capacity("web1", readings(45), 20.0)  # 45 of 4,500: 1%, measured
    assert measured.capacity_per_s == pytest.approx(375.0)
    assert (measured.queued, measured.unstamped, measured.queueing_unmeasured) == (4500, 45, None)
    refused = server_capacity("web1", readings(46), 20.0)
    assert refused.capacity_per_s is None
    assert refused.queueing_unmeasured is not None
    assert refused.queueing_unmeasured.startswith(
        "queueing not measured: 46 of 4,500 requests had no kernel receive timestamp"
    )
    # A service that does not count them is taken at its word.
    unknown = server_capacity("web1", readings(None), 20.0)
    assert unknown.capacity_per_s == pytest.approx(375.0) and unknown.unstamped is None


def step(
    served: float, offered: float, *, healthy: bool = True, b: Breakdown | None = None
) -> Step:
    return Step(
        t_s=0.0, share=0.5, next_share=0.5, weights={}, action="increase", step=0.0, reason="",
        metric=None, levels={"m": "BOLD"}, values={"m": 1.0}, served_per_s=served,
        offered_per_s=offered, breakdown=b, servers={}, healthy=healthy,
    )  # fmt: skip


def test_measured_capacity_is_the_healthy_interval_that_sustained_most() -> None:
    steps = [step(500, 500), step(990, 975), step(1280, 1064, healthy=False), step(940, 975)]
    best = measured_capacity(steps)
    assert best is steps[1]  # 975 sustained: served beyond offered is a backlog draining


def test_the_bottleneck_is_the_service_component_whose_share_grew_most() -> None:
    start = Breakdown(queue_ms=0.1, work_ms=0.8, cache_ms=1.2)
    end = Breakdown(queue_ms=50.0, work_ms=0.8, cache_ms=3.2)
    b = find_bottleneck(start, end)
    assert b is not None and b.component == "cache"
    assert b.growth["cache"] == pytest.approx(0.8 - 0.6)
    assert b.growth["work"] == pytest.approx(-0.2)
    # Queueing grew most of all, but it is what a held worker causes, never the cause.
    assert find_bottleneck(None, end) is None
    assert math.isnan(Breakdown(0, 0, 0).shares()["work"])
