"""Shaping traces: endpoint filters, exact mixes, reservoir and uniform sampling (seeded)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from hairline.errors import ConfigError, DataError
from hairline.trace.format import TraceRequest
from hairline.trace.shape import (
    bernoulli_sample,
    derived_header,
    filter_endpoints,
    mix_trace,
    parse_mix,
    parse_reservoir,
    reservoir_sample,
)


def trace_of(counts: dict[str, int], *, gap_us: int = 1000) -> list[TraceRequest]:
    """Labels interleaved round-robin, one request every ``gap_us``, ids in order."""
    left = dict(counts)
    out: list[TraceRequest] = []
    while any(left.values()):
        for label in counts:
            if left[label]:
                left[label] -= 1
                n = len(out)
                out.append(
                    TraceRequest(path=f"/{label}?n={n}", endpoint=label, ts_us=n * gap_us, id=n)
                )
    return out


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def is_ordered_subset(sample: list[TraceRequest], trace: list[TraceRequest]) -> bool:
    ids = [r.id for r in sample]
    return ids == sorted(set(ids)) and all(trace[r.id] == r for r in sample)


# --- filter ----------------------------------------------------------------------------------


def test_filter_keeps_matching_labels_in_order() -> None:
    trace = trace_of({"/api/feed": 3, "/api/search": 2, "/healthz": 4})
    kept = filter_endpoints(trace, ["/api/*"])
    assert Counter(r.label for r in kept) == {"/api/feed": 3, "/api/search": 2}
    assert is_ordered_subset(kept, trace)
    assert filter_endpoints(trace, []) == trace
    with pytest.raises(DataError, match="/api/serch: no endpoint label matches") as info:
        filter_endpoints(trace, ["/api/serch", "/healthz"])
    assert info.value.hint and "/api/search" in info.value.hint


# --- mix -------------------------------------------------------------------------------------


def test_mix_without_count_is_the_largest_exact_sample_without_repeats() -> None:
    trace = trace_of({"feed": 100, "search": 50, "profile": 30})
    result = mix_trace(trace, parse_mix(["feed=3", "search=1"]), rng=rng())

    counts = Counter(r.label for r in result.requests)
    assert counts == {"feed": 99, "search": 33}  # exactly 3:1; 33 is the most 100 feeds allow
    assert result.dropped == 30 and result.passes == 1 and not result.with_replacement
    assert is_ordered_subset(result.requests, trace)  # recorded order and timestamps kept
    assert [g.max_copies for g in result.groups] == [1, 1]


def test_decimal_weights_are_exact_ratios() -> None:
    trace = trace_of({"a": 40, "b": 40, "c": 40})
    result = mix_trace(trace, parse_mix(["a=0.5", "b=0.3", "c=0.2"]), rng=rng())
    assert Counter(r.label for r in result.requests) == {"a": 40, "b": 24, "c": 16}
    assert [g.share for g in result.groups] == [0.5, 0.3, 0.2]


def test_glob_weights_group_labels() -> None:
    trace = trace_of({"/api/feed": 10, "/api/search": 10, "/static/x": 60})
    result = mix_trace(trace, parse_mix(["/api/*=1", "/static/*=1"]), rng=rng())
    counts = Counter(r.label for r in result.requests)
    assert counts["/api/feed"] + counts["/api/search"] == counts["/static/x"] == 20


def test_an_impossible_exact_mix_says_to_use_count() -> None:
    trace = trace_of({"a": 5, "b": 5})
    with pytest.raises(DataError, match="a needs 749, has 5") as info:
        mix_trace(trace, parse_mix(["a=0.749", "b=0.251"]), rng=rng())
    assert info.value.hint and "--count" in info.value.hint


def test_mix_with_count_repeats_scarce_labels_over_passes_of_the_timeline() -> None:
    trace = trace_of({"a": 100, "b": 50, "c": 7})
    result = mix_trace(trace, parse_mix(["a=1", "b=1"]), count=1000, rng=rng(3))

    assert len(result.requests) == 1000
    assert Counter(r.label for r in result.requests) == {"a": 500, "b": 500}
    assert result.passes == 10 and result.with_replacement
    # Every b request is in every pass; every a request in exactly 5 of them.
    copies = Counter(r.id for r in result.requests)
    assert all(copies[r.id] == 10 for r in trace if r.label == "b")
    assert all(copies[r.id] == 5 for r in trace if r.label == "a")
    assert [g.max_copies for g in result.groups] == [5, 10]
    # Each pass holds an equal share of each group, and time only moves forward.
    span_us = (len(trace) - 1) * 1000 + 1000
    passes = Counter(((r.ts_us or 0) // span_us, r.label) for r in result.requests)
    assert set(passes.values()) == {50}
    times = [r.ts_us or 0 for r in result.requests]
    assert times == sorted(times)


def test_count_alone_samples_the_natural_mix() -> None:
    trace = trace_of({"a": 30, "b": 10})
    result = mix_trace(trace, (), count=20, rng=rng())
    assert len(result.requests) == 20 and result.passes == 1
    assert is_ordered_subset(result.requests, trace)


def test_repeats_are_as_even_as_possible() -> None:
    trace = trace_of({"a": 7, "b": 3})
    result = mix_trace(trace, parse_mix(["a=1", "b=2"]), count=100, rng=rng(1))
    copies = Counter(r.id for r in result.requests)
    a_copies = {copies[r.id] for r in trace if r.label == "a"}
    assert a_copies <= {4, 5} and sum(copies[r.id] for r in trace if r.label == "a") == 33
    assert {copies[r.id] for r in trace if r.label == "b"} <= {22, 23}
    # No pass holds the same request twice.
    span_us = (len(trace) - 1) * 1000 + 1000
    per_pass = Counter(((r.ts_us or 0) // span_us, r.id) for r in result.requests)
    assert set(per_pass.values()) == {1}


def test_count_apportions_by_largest_remainder() -> None:
    trace = trace_of({"a": 100, "b": 100, "c": 100})
    result = mix_trace(trace, parse_mix(["a=1", "b=1", "c=1"]), count=100, rng=rng())
    assert sorted(Counter(r.label for r in result.requests).values()) == [33, 33, 34]


def test_mix_options_are_checked() -> None:
    with pytest.raises(ConfigError) as info:
        parse_mix(["a=0", "b=x", "=3", "c", "d=1", "d=2", "e=nan"])
    for bad in ("'a=0'", "'b=x'", "'=3'", "'c'", "'d' given twice", "'e=nan'"):
        assert bad in info.value.message
    assert parse_mix(["/a=b=2"])[0].pattern == "/a=b"  # split on the last '='
    trace = trace_of({"/api/feed": 2, "/api/x": 2})
    with pytest.raises(ConfigError, match="matches --mix"):
        mix_trace(trace, parse_mix(["/api/*=1", "/api/feed=1"]), rng=rng())
    with pytest.raises(DataError, match="no request has a matching label"):
        mix_trace(trace, parse_mix(["/nope=1"]), rng=rng())


# --- reservoir -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "k", "interval_us"),
    [
        ("100/1s", 100, 1_000_000),
        ("10/500ms", 10, 500_000),
        ("5/1m", 5, 60_000_000),
        ("100/s", 100, 1_000_000),
        ("1/1.5s", 1, 1_500_000),
        ("2/250us", 2, 250),
        ("3/2h", 3, 7_200_000_000),
    ],
)
def test_reservoir_syntax(text: str, k: int, interval_us: int) -> None:
    r = parse_reservoir(text)
    assert (r.k, r.interval_us) == (k, interval_us)


@pytest.mark.parametrize("text", ["0/1s", "10/0s", "10", "10/1", "10/0.5us", "a/1s", "-1/1s"])
def test_bad_reservoirs_are_refused(text: str) -> None:
    with pytest.raises(ConfigError, match="K/T"):
        parse_reservoir(text)


def bursty_trace(seed: int) -> list[TraceRequest]:
    """Seconds with 0 to 40 requests at random times, two endpoints."""
    gen = np.random.default_rng(seed)
    times = sorted(
        int(s * 1_000_000 + gen.integers(0, 1_000_000))
        for s in range(30)
        for _ in range(int(gen.integers(0, 41)))
    )
    return [
        TraceRequest(path="/x", endpoint="ab"[int(gen.integers(0, 2))], ts_us=t, id=i)
        for i, t in enumerate(times)
    ]


@pytest.mark.parametrize("seed", range(5))
def test_reservoir_never_exceeds_k_and_fills_k_when_traffic_allows(seed: int) -> None:
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input."""
    trace = bursty_trace(seed)
    t0 = trace[0].ts_us or 0
    per_second = Counter(((r.ts_us or 0) - t0) // 1_000_000 for r in trace)

    result = reservoir_sample(trace, parse_reservoir("10/1s"), rng=rng(seed))

    kept = Counter(((r.ts_us or 0) - t0) // 1_000_000 for r in result.requests)
    assert kept == {s: min(10, n) for s, n in per_second.items()}
    assert is_ordered_subset(result.requests, trace)
    assert result.full_intervals == sum(1 for n in per_second.values() if n >= 10)

    by_endpoint = reservoir_sample(trace, parse_reservoir("3/1s"), per_endpoint=True, rng=rng())
    kept_cells = Counter(
        (((r.ts_us or 0) - t0) // 1_000_000, r.label) for r in by_endpoint.requests
    )
    all_cells = Counter((((r.ts_us or 0) - t0) // 1_000_000, r.label) for r in trace)
    assert kept_cells == {c: min(3, n) for c, n in all_cells.items()}


def test_reservoir_picks_uniformly_within_an_interval() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The bound is 5
    binomial sd for each of 10 requests: about 1 seed in 170,000 would fail it."""
    trace = [TraceRequest(path="/x", ts_us=i, id=i) for i in range(10)]
    seen: Counter[int] = Counter()
    trials = 2000
    for seed in range(trials):
        seen.update(
            r.id for r in reservoir_sample(trace, parse_reservoir("3/1s"), rng=rng(seed)).requests
        )
    # Each request is kept with probability 3/10; 5 sd of the binomial either side.
    sd = math.sqrt(trials * 0.3 * 0.7)
    assert all(abs(seen[i] - trials * 0.3) < 5 * sd for i in range(10)), seen


def test_reservoir_needs_timestamps() -> None:
    with pytest.raises(DataError, match="no ts_us") as info:
        reservoir_sample([TraceRequest(path="/x")], parse_reservoir("1/1s"), rng=rng())
    assert info.value.hint and "--fraction" in info.value.hint


# --- uniform ---------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fraction_is_within_its_binomial_band(seed: int) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The bound is 4
    binomial sd: about 1 seed in 16,000 would fail it."""
    trace = [TraceRequest(path="/x", ts_us=i, id=i) for i in range(20_000)]
    result = bernoulli_sample(trace, 0.1, rng=rng(seed))
    sd = math.sqrt(20_000 * 0.1 * 0.9)
    assert abs(len(result.requests) - 2_000) < 4 * sd
    assert is_ordered_subset(result.requests, trace)
    again = bernoulli_sample(trace, 0.1, rng=rng(seed))
    assert again.requests == result.requests  # the seed decides


def test_fraction_bounds() -> None:
    trace = [TraceRequest(path="/x")]
    assert bernoulli_sample(trace, 1.0, rng=rng()).requests == trace
    for bad in (0.0, 1.5):
        with pytest.raises(ConfigError, match="--fraction"):
            bernoulli_sample(trace, bad, rng=rng())


def test_derived_headers_keep_provenance() -> None:
    header = derived_header({"hairline_trace": 1, "source": "record"}, {"op": "sample"})
    header = derived_header(header, {"op": "filter"})
    assert header["source"] == "record"
    assert header["derived"] == [{"op": "sample"}, {"op": "filter"}]
