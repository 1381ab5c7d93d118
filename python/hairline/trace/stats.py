"""What a trace holds: requests by endpoint, rate over time, body sizes, methods.

Pure functions of the requests. Rates use recorded ``ts_us``: the duration is last minus
first timestamp, and the mean rate is ``(n - 1) / duration``, the rate at which
``--pace recorded`` replays the trace (it loops after one mean gap). Body-size percentiles
are nearest-rank (a size some request really has).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hairline.errors import ConfigError
from hairline.trace.format import TraceRequest

__all__ = [
    "BodySizes",
    "EndpointStats",
    "RateBucket",
    "TraceStats",
    "auto_bucket_s",
    "trace_stats",
]

# Bucket lengths that read well, from 1 ms to a day.
_NICE_BUCKETS_S = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5,
    1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
)  # fmt: skip
_MAX_BUCKETS = 100_000


@dataclass(frozen=True)
class BodySizes:
    """Request body sizes in bytes (0 for requests without a body)."""

    mean_bytes: float
    p50_bytes: int
    p99_bytes: int
    max_bytes: int


@dataclass(frozen=True)
class EndpointStats:
    label: str
    count: int
    share: float
    body: BodySizes
    methods: dict[str, int]


@dataclass(frozen=True)
class RateBucket:
    """Requests whose ``ts_us`` fall in ``[start_s, start_s + bucket_s)`` of the trace."""

    start_s: float
    count: int
    rate_per_s: float


@dataclass(frozen=True)
class TraceStats:
    request_count: int
    endpoint_count: int
    timed_count: int
    duration_s: float | None
    mean_rate_per_s: float | None
    backwards_count: int
    first_ts_us: int | None
    bucket_s: float | None
    peak_rate_per_s: float | None
    methods: dict[str, int]
    body: BodySizes
    endpoints: list[EndpointStats]
    rate: list[RateBucket]


def auto_bucket_s(duration_s: float, *, max_buckets: int = 60, resolution_s: float = 0.0) -> float:
    """The smallest readable bucket length that cuts ``duration_s`` into <= max_buckets.

    Buckets are no shorter than ``resolution_s``, the timestamps' own resolution (a log
    with whole seconds would otherwise show spikes and holes that are not there).
    """
    for bucket in _NICE_BUCKETS_S:
        if duration_s / bucket < max_buckets and bucket >= resolution_s:
            return float(bucket)
    return float(math.ceil(duration_s / max_buckets / 86400) * 86400)


def _body_sizes(sizes: Sequence[int]) -> BodySizes:
    if not sizes:
        return BodySizes(0.0, 0, 0, 0)
    arr = np.asarray(sizes, dtype=np.int64)
    p50, p99 = np.percentile(arr, [50, 99], method="inverted_cdf")
    return BodySizes(float(arr.mean()), int(p50), int(p99), int(arr.max()))


def _nearest_rank_index(counts: npt.NDArray[np.int64], percentile: float) -> npt.NDArray[np.int64]:
    """The index of the nearest-rank percentile in each sorted group of ``counts`` values:
    numpy's ``inverted_cdf`` rule, computed the way numpy computes it, for all groups at
    once."""
    index = counts * np.true_divide(percentile, 100) - 1
    below = np.floor(index)
    chosen: npt.NDArray[np.float64] = np.where(index - below > 0, below + 1, below)
    return np.clip(chosen, 0, counts - 1).astype(np.int64)


def _endpoint_stats(requests: Sequence[TraceRequest]) -> list[EndpointStats]:
    """Per label, in one pass and a few array operations: a trace may have a label per
    request, and a numpy call per label took minutes on such traces."""
    index: dict[str, int] = {}
    methods: list[dict[str, int]] = []
    of_request = np.empty(len(requests), dtype=np.int64)
    sizes = np.empty(len(requests), dtype=np.int64)
    for i, r in enumerate(requests):
        e = index.setdefault(r.label, len(index))
        if e == len(methods):
            methods.append({})
        counted = methods[e]
        counted[r.method] = counted.get(r.method, 0) + 1
        of_request[i] = e
        sizes[i] = len(r.body)
    if not index:
        return []
    counts = np.bincount(of_request, minlength=len(index))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    by_label = np.lexsort((sizes, of_request))
    ordered = sizes[by_label]
    p50 = ordered[starts + _nearest_rank_index(counts, 50)]
    p99 = ordered[starts + _nearest_rank_index(counts, 99)]
    largest = ordered[starts + counts - 1]
    means = np.bincount(of_request, weights=sizes, minlength=len(index)) / counts
    n = len(requests)
    stats = [
        EndpointStats(
            label=label,
            count=int(counts[e]),
            share=int(counts[e]) / n,
            body=BodySizes(float(means[e]), int(p50[e]), int(p99[e]), int(largest[e])),
            # Most frequent first, ties in order of appearance (as Counter.most_common).
            methods=dict(sorted(methods[e].items(), key=lambda kv: -kv[1])),
        )
        for label, e in index.items()
    ]
    stats.sort(key=lambda s: (-s.count, s.label))
    return stats


def trace_stats(requests: Sequence[TraceRequest], *, bucket_s: float | None = None) -> TraceStats:
    """Summarise ``requests``; ``bucket_s=None`` picks a bucket giving at most 60 buckets."""
    if bucket_s is not None and not (math.isfinite(bucket_s) and bucket_s > 0):
        raise ConfigError(f"--bucket-s {bucket_s}: must be positive", hint="e.g. --bucket-s 1")
    n = len(requests)
    endpoints = _endpoint_stats(requests)
    times = [r.ts_us for r in requests if r.ts_us is not None]
    backwards = sum(1 for a, b in itertools.pairwise(times) if b < a)
    duration_s = mean_rate = first = chosen_bucket = peak = None
    buckets: list[RateBucket] = []
    if len(times) >= 2:
        first, last = min(times), max(times)
        duration_s = (last - first) / 1e6
        mean_rate = (len(times) - 1) / duration_s if duration_s > 0 else None
        if bucket_s is None:
            offsets = np.asarray(times, dtype=np.int64) - first
            resolution_s = float(np.gcd.reduce(offsets)) / 1e6
            chosen_bucket = auto_bucket_s(duration_s, resolution_s=resolution_s)
        else:
            chosen_bucket = bucket_s
        bucket_us = max(1, round(chosen_bucket * 1e6))
        n_buckets = (last - first) // bucket_us + 1
        if n_buckets > _MAX_BUCKETS:
            raise ConfigError(
                f"--bucket-s {chosen_bucket} cuts {duration_s:.0f} s into {n_buckets} buckets",
                hint=f"use a larger --bucket-s (at most {_MAX_BUCKETS} buckets), or omit it",
            )
        counts = np.bincount(
            (np.asarray(times, dtype=np.int64) - first) // bucket_us, minlength=n_buckets
        )
        buckets = [
            RateBucket(
                start_s=i * bucket_us / 1e6, count=int(c), rate_per_s=int(c) / (bucket_us / 1e6)
            )
            for i, c in enumerate(counts)
        ]
        # The last bucket is usually cut short by the end of the trace: not a fair peak.
        full = buckets[:-1] if len(buckets) > 1 else buckets
        peak = max(b.rate_per_s for b in full)
    elif times:
        first = times[0]
    return TraceStats(
        request_count=n,
        endpoint_count=len(endpoints),
        timed_count=len(times),
        duration_s=duration_s,
        mean_rate_per_s=mean_rate,
        backwards_count=backwards,
        first_ts_us=first,
        bucket_s=chosen_bucket,
        peak_rate_per_s=peak,
        methods=dict(Counter(r.method for r in requests).most_common()),
        body=_body_sizes([len(r.body) for r in requests]),
        endpoints=endpoints,
        rate=buckets,
    )
