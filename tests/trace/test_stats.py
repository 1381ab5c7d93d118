"""Trace statistics: counts, shares, rates over time, body sizes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hairline.errors import ConfigError
from hairline.trace.format import TraceRequest
from hairline.trace.stats import auto_bucket_s, trace_stats


def request(
    label: str, ts_us: int | None, *, body: bytes = b"", method: str = "GET"
) -> TraceRequest:
    return TraceRequest(path=f"/{label}?x=1", endpoint=label, ts_us=ts_us, body=body, method=method)


def test_counts_shares_methods_and_body_sizes_by_endpoint() -> None:
    requests = [request("feed", i * 10_000) for i in range(6)]
    requests += [
        request("search", 60_000 + i * 10_000, body=b"x" * (i + 1), method="POST")
        for i in range(100)
    ]

    stats = trace_stats(requests)

    assert stats.request_count == 106 and stats.endpoint_count == 2
    search, feed = stats.endpoints  # most requests first
    assert (search.label, search.count, feed.label, feed.count) == ("search", 100, "feed", 6)
    assert search.share == pytest.approx(100 / 106)
    assert search.methods == {"POST": 100}
    # Nearest rank: sizes 1..100 bytes.
    assert (search.body.p50_bytes, search.body.p99_bytes, search.body.max_bytes) == (50, 99, 100)
    assert search.body.mean_bytes == pytest.approx(50.5)
    assert feed.body.p99_bytes == 0
    assert stats.methods == {"POST": 100, "GET": 6}


def test_duration_mean_rate_and_buckets() -> None:
    # 0.5 s at 100/s, then 0.5 s at 20/s: 61 requests over 1.0 s.
    times = [i * 10_000 for i in range(50)] + [500_000 + i * 50_000 for i in range(11)]
    stats = trace_stats([request("a", 1_000_000 + t) for t in times], bucket_s=0.25)

    assert stats.duration_s == pytest.approx(1.0)
    assert stats.mean_rate_per_s == pytest.approx(60.0)  # (n - 1) / duration: replay's rate
    assert stats.bucket_s == 0.25
    assert [b.count for b in stats.rate] == [25, 25, 5, 5, 1]
    assert [b.start_s for b in stats.rate] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert stats.rate[0].rate_per_s == pytest.approx(100.0)
    assert stats.peak_rate_per_s == pytest.approx(100.0)  # the cut-short last bucket aside


def test_automatic_buckets_respect_the_timestamps_resolution() -> None:
    # A combined log: whole seconds over 10 s. Buckets under 1 s would show false holes.
    stats = trace_stats([request("a", s * 1_000_000) for s in range(11) for _ in range(3)])
    assert stats.bucket_s == 1.0
    assert {b.count for b in stats.rate} == {3}
    assert auto_bucket_s(3600) == 120.0  # 60 s buckets would make 61 of them
    assert auto_bucket_s(0.05) == 0.001


def test_untimed_and_backwards_requests_are_counted() -> None:
    stats = trace_stats([request("a", 5), request("a", 3), request("a", None), request("a", 9)])
    assert stats.timed_count == 3 and stats.backwards_count == 1
    assert stats.duration_s == pytest.approx(6e-6)
    untimed = trace_stats([request("a", None)])
    assert untimed.duration_s is None and untimed.rate == [] and untimed.mean_rate_per_s is None


def test_bucket_sizes_are_checked() -> None:
    with pytest.raises(ConfigError, match="must be positive"):
        trace_stats([request("a", 0)], bucket_s=0)
    with pytest.raises(ConfigError, match="buckets"):
        trace_stats([request("a", 0), request("a", 10**12)], bucket_s=0.001)


def test_per_endpoint_figures_are_each_groups_own() -> None:
    # Labels of every size, bodies and methods drawn at random: each endpoint's figures are
    # those of its requests alone, computed group by group here.
    rng = np.random.default_rng(11)
    requests = [
        request(
            f"e{int(rng.integers(0, 40) ** 2 % 97)}",
            None,
            body=b"x" * int(rng.integers(0, 3000)),
            method=str(rng.choice(["GET", "POST", "PUT"], p=[0.7, 0.2, 0.1])),
        )
        for _ in range(3000)
    ]

    stats = trace_stats(requests)

    groups: dict[str, list[TraceRequest]] = {}
    for r in requests:
        groups.setdefault(r.label, []).append(r)
    assert [e.label for e in stats.endpoints] == sorted(groups, key=lambda k: (-len(groups[k]), k))
    for e in stats.endpoints:
        sizes = [len(r.body) for r in groups[e.label]]
        p50, p99 = np.percentile(sizes, [50, 99], method="inverted_cdf")
        assert (e.count, e.body.p50_bytes, e.body.p99_bytes) == (len(sizes), p50, p99)
        assert (e.body.max_bytes, e.body.mean_bytes) == (max(sizes), pytest.approx(np.mean(sizes)))
        assert e.methods == dict(Counter(r.method for r in groups[e.label]).most_common())
        assert list(e.methods) == [
            m for m, _ in Counter(r.method for r in groups[e.label]).most_common()
        ]
