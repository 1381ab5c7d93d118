"""What a Kraken test measured, and the pure arithmetic on it: served rates and the latency
breakdown from the sample services' counters, per-server capacity by queueing delay
(Kraken 5.1.1), refused where the kernel gave no receive timestamps to measure queueing
from, the measured cluster capacity and the bottleneck (Kraken 5.1.2, Figure 8).

No I/O and no clock here: the controller (:mod:`hairline.kraken.controller`) feeds it scrapes
and times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hairline.collect.prometheus import Sample as SeriesKey
from hairline.kit.jsonout import documented

__all__ = [
    "COMPONENTS",
    "SERVICE_COMPONENTS",
    "UNSTAMPED_LIMIT",
    "Bottleneck",
    "Breakdown",
    "Counters",
    "KrakenResult",
    "PhaseResult",
    "ServerCapacity",
    "ServerReading",
    "Step",
    "TestSample",
    "breakdown_of",
    "counters_of",
    "find_bottleneck",
    "mean_breakdown",
    "measured_capacity",
    "queue_crossing",
    "server_capacity",
    "stamping_of",
    "sustained_per_s",
    "unmeasured_queueing",
]

#: The latency components the sample services report, in the order plots stack them:
#: waiting for a worker thread, the request's own work, waiting on the downstream cache.
COMPONENTS = ("queue", "work", "cache")
#: The components that hold a worker thread. Queueing is what any of them causes once the
#: threads are all held, so it is a symptom, never itself the bottleneck.
SERVICE_COMPONENTS = ("work", "cache")
_HISTOGRAMS = {
    "queue": "sample_queue_seconds",
    "work": "sample_work_seconds",
    "cache": "sample_cache_wait_seconds",
}
#: The sample service's count of queue times that started at the read because the kernel
#: gave no receive timestamp (docs/engine.md, "Metrics").
_UNSTAMPED = "sample_queue_unstamped_total"
#: Above this share of requests timed from their read, a server's queueing delay is not a
#: measurement: each such request's wait in the socket's buffer is missing, so the delay
#: reads low and a capacity by queueing delay comes out too high. 1% keeps the handful the
#: kernel may leave unstamped while it switches stamping on (engine/src/net/recv_stamp.rs)
#: from refusing a capacity, and refuses any kernel that stamps few or none.
UNSTAMPED_LIMIT = 0.01


@dataclass(frozen=True)
class Counters:
    """One server's cumulative counters from one scrape: API requests answered 200, and each
    component's histogram ``_sum`` (seconds) and ``_count``."""

    served: float
    sums_s: Mapping[str, float]
    counts: Mapping[str, float]
    #: Of the queue histogram's requests, those timed from their read (no kernel receive
    #: timestamp); None when the service does not export the count.
    unstamped: float | None = None


def counters_of(parsed: Mapping[SeriesKey, float]) -> Counters:
    """The counters of one parsed ``/metrics`` scrape (``collect.prometheus.parse_text``)."""
    served = 0.0
    unstamped: float | None = None
    sums: dict[str, float] = dict.fromkeys(COMPONENTS, 0.0)
    counts: dict[str, float] = dict.fromkeys(COMPONENTS, 0.0)
    by_name = {f"{h}_sum": ("sum", c) for c, h in _HISTOGRAMS.items()}
    by_name |= {f"{h}_count": ("count", c) for c, h in _HISTOGRAMS.items()}
    for (name, labels), value in parsed.items():
        if name == "sample_requests_total":
            label = dict(labels)
            if label.get("status") == "200" and label.get("endpoint", "").startswith("/api/"):
                served += value
        elif name in by_name:
            kind, component = by_name[name]
            (sums if kind == "sum" else counts)[component] += value
        elif name == _UNSTAMPED:
            unstamped = (unstamped or 0.0) + value
    return Counters(served=served, sums_s=sums, counts=counts, unstamped=unstamped)


def stamping_of(before: Counters, after: Counters) -> tuple[float | None, float | None]:
    """One server's requests timed in its queue histogram between two scrapes, and how many
    of them had no kernel receive timestamp; None where a count is unknown (the service does
    not export it, or it restarted and its counters went back)."""
    queued = after.counts["queue"] - before.counts["queue"]
    if queued < 0:
        return None, None
    if before.unstamped is None or after.unstamped is None:
        return queued, None
    unstamped = after.unstamped - before.unstamped
    return queued, unstamped if unstamped >= 0 else None


@dataclass(frozen=True)
class Breakdown:
    """Mean milliseconds per request in each component over some time."""

    queue_ms: float
    work_ms: float
    cache_ms: float

    def ms(self, component: str) -> float:
        value: float = getattr(self, f"{component}_ms")
        return value

    @property
    def total_ms(self) -> float:
        return self.queue_ms + self.work_ms + self.cache_ms

    def shares(self, components: Sequence[str] = COMPONENTS) -> dict[str, float]:
        """Each component's fraction of the given components' total (NaN if it is 0)."""
        total = sum(self.ms(c) for c in components)
        return {c: self.ms(c) / total if total > 0 else math.nan for c in components}


def breakdown_of(
    before: Sequence[Counters], after: Sequence[Counters], elapsed_s: float
) -> tuple[float | None, Breakdown | None]:
    """Served requests/s and the latency breakdown of a group of servers between two
    scrapes of each (``before[i]`` and ``after[i]`` are server i's). None where the
    interval saw no request (or a server restarted and its counters went back)."""
    served = sum(a.served - b.served for b, a in zip(before, after, strict=True))
    rate = served / elapsed_s if elapsed_s > 0 and served >= 0 else None
    ms: dict[str, float] = {}
    for c in COMPONENTS:
        d_sum = sum(a.sums_s[c] - b.sums_s[c] for b, a in zip(before, after, strict=True))
        d_count = sum(a.counts[c] - b.counts[c] for b, a in zip(before, after, strict=True))
        if c == "cache" and d_count == 0:
            ms[c] = 0.0  # a service without --cache exports the histogram with no counts
        elif d_count <= 0 or d_sum < 0:
            ms[c] = math.nan
        else:
            ms[c] = 1000.0 * d_sum / d_count
    if any(math.isnan(v) for v in ms.values()):
        return rate, None
    return rate, Breakdown(ms["queue"], ms["work"], ms["cache"])


def mean_breakdown(items: Sequence[Breakdown | None]) -> Breakdown | None:
    present = [b for b in items if b is not None]
    if not present:
        return None
    return Breakdown(
        *(sum(b.ms(c) for b in present) / len(present) for c in COMPONENTS),
    )


@dataclass(frozen=True)
class ServerReading:
    """One server under test over one sample or control interval."""

    served_per_s: float | None
    queue_ms: float | None
    queued: float | None = None
    """Requests whose queueing the server timed (its queue histogram's count)."""
    unstamped: float | None = None
    """Of them, those timed from their read: the kernel gave no receive timestamp (null: not
    known)."""


@dataclass(frozen=True)
class TestSample:
    """One sample interval: what the load balancer gave the system under test and how it
    and the users fared."""

    t_s: float
    share: float
    served_per_s: float | None
    breakdown: Breakdown | None
    servers: Mapping[str, ServerReading]
    user_rate_per_s: float
    user_p99_ms: float
    values: Mapping[str, float | None]


@documented
@dataclass(frozen=True)
class Step:
    """One control interval and the decision that ended it (Kraken 4.3)."""

    t_s: float
    """When the interval ended, in seconds from the test's start."""
    share: float
    """The share the system under test had during the interval."""
    next_share: float
    """The share decided."""
    weights: Mapping[str, int]
    action: str
    step: float
    reason: str
    metric: str | None
    levels: Mapping[str, str | None]
    """Each health metric's level over its window (null: no samples)."""
    values: Mapping[str, float | None]
    """Each health metric's latest value."""
    served_per_s: float | None
    offered_per_s: float
    breakdown: Breakdown | None
    servers: Mapping[str, ServerReading]
    healthy: bool = True
    """Every metric known, none at BACKOFF by level or by its latest value."""


@documented
@dataclass(frozen=True)
class ServerCapacity:
    """A server's capacity by queueing delay: the served rate at which its mean queueing
    delay crossed the limit (interpolated), None if it never did or if its queueing was not
    measured."""

    server: str
    capacity_per_s: float | None
    queued: float = 0.0
    """Requests whose queueing the server timed over the test."""
    unstamped: float | None = None
    """Of them, those timed from their read because the kernel gave no receive timestamp
    (null: the service does not count them)."""
    queueing_unmeasured: str | None = None
    """Why the capacity was refused: more than 1% of the requests had no kernel receive
    timestamp, so their queueing was under-measured (null: it was measured)."""


def unmeasured_queueing(queued: float, unstamped: float | None) -> str | None:
    """Why a server's queueing delay is not a measurement, None when it is (or when the
    service does not say): more than :data:`UNSTAMPED_LIMIT` of its requests were timed
    from their read."""
    if unstamped is None or queued <= 0 or unstamped / queued <= UNSTAMPED_LIMIT:
        return None
    return (
        f"queueing not measured: {unstamped:,.0f} of {queued:,.0f} requests had no kernel "
        "receive timestamp (SO_TIMESTAMPNS), so their wait in the socket buffer was not seen"
    )


def server_capacity(
    server: str, points: Sequence[ServerReading], limit_ms: float
) -> ServerCapacity:
    """A server's capacity by queueing delay over its control intervals, refused (None, with
    the reason) when its queueing was not measured: a delay that misses the wait in the
    socket buffer crosses the limit late, and the capacity would be over-estimated."""
    queued = sum(p.queued for p in points if p.queued is not None)
    known = [p.unstamped for p in points if p.unstamped is not None]
    unstamped = sum(known) if known else None
    why = unmeasured_queueing(queued, unstamped)
    crossing = None if why is not None else queue_crossing(points, limit_ms)
    return ServerCapacity(server, crossing, queued, unstamped, why)


def queue_crossing(points: Sequence[ServerReading], limit_ms: float) -> float | None:
    """The served rate at which queueing delay first reaches ``limit_ms``, interpolated
    linearly between the control interval before and the one that crossed (Kraken 5.1.1);
    None if it never crossed."""
    previous: ServerReading | None = None
    for point in points:
        if point.queue_ms is None or point.served_per_s is None:
            continue
        if point.queue_ms >= limit_ms:
            if previous is None or previous.queue_ms is None or previous.served_per_s is None:
                return point.served_per_s
            span = point.queue_ms - previous.queue_ms
            if span <= 0:
                return point.served_per_s
            f = (limit_ms - previous.queue_ms) / span
            return previous.served_per_s + f * (point.served_per_s - previous.served_per_s)
        previous = point
    return None


def measured_capacity(steps: Sequence[Step]) -> Step | None:
    """The healthy control interval that served the most: the load the system under test
    sustained. Served beyond offered is a backlog draining, not capacity, so each interval
    counts the smaller of the two."""
    healthy = [s for s in steps if s.served_per_s is not None and s.healthy]
    return max(healthy, key=sustained_per_s, default=None)


def sustained_per_s(step: Step) -> float:
    return min(step.served_per_s or 0.0, step.offered_per_s)


@documented
@dataclass(frozen=True)
class Bottleneck:
    """Which component's share of the servers' service time grew most from the test's
    first control interval to its last (Figure 8b)."""

    component: str
    start: Breakdown
    end: Breakdown
    growth: Mapping[str, float]
    """Growth of each service component's share of service time (work + cache)."""


def find_bottleneck(start: Breakdown | None, end: Breakdown | None) -> Bottleneck | None:
    if start is None or end is None:
        return None
    before, after = start.shares(SERVICE_COMPONENTS), end.shares(SERVICE_COMPONENTS)
    growth = {c: after[c] - before[c] for c in SERVICE_COMPONENTS}
    if any(math.isnan(g) for g in growth.values()):
        return None
    return Bottleneck(max(growth, key=lambda c: growth[c]), start, end, growth)


@documented
@dataclass(frozen=True)
class PhaseResult:
    """One controlled test: a server test or a cluster test."""

    kind: str
    servers: tuple[str, ...]
    original_weights: Mapping[str, int]
    samples: tuple[TestSample, ...]
    steps: tuple[Step, ...]
    stopped_by: str
    stop_metric: str | None
    aborted: bool
    restored: bool
    """Whether the original weights were put back."""
    capacity_per_s: float | None
    """A server test: the mean of the servers' capacities; a cluster test: the measured
    one."""
    server_capacities: tuple[ServerCapacity, ...] = ()
    bottleneck: Bottleneck | None = None
    notes: tuple[str, ...] = ()
    metric_ranges: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    """Each health metric's five level ranges, for plots of its values against them."""


@dataclass(frozen=True)
class KrakenResult:
    """A ``hairline kraken`` run: the cluster (or server) test, the server test run before
    it for the theoretical capacity, and measured against theoretical (Figure 8a)."""

    file: str
    kind: str
    test: PhaseResult
    server_test: PhaseResult | None = None
    per_server_capacity_per_s: float | None = None
    theoretical_capacity_per_s: float | None = None
    measured_capacity_per_s: float | None = None
    queue_limit_ms: float = 20.0
    notes: tuple[str, ...] = field(default=())

    @property
    def fraction_of_theoretical(self) -> float | None:
        m, t = self.measured_capacity_per_s, self.theoretical_capacity_per_s
        return m / t if m is not None and t else None

    @property
    def aborted(self) -> bool:
        return self.test.aborted or (self.server_test is not None and self.server_test.aborted)

    @property
    def restored(self) -> bool:
        """Whether every test put the original weights back."""
        return self.test.restored and (self.server_test is None or self.server_test.restored)

    @property
    def found(self) -> bool:
        """Finished, with a capacity: the command's exit status 0."""
        return not self.aborted and self.measured_capacity_per_s is not None
