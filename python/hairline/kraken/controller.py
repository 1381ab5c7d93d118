"""The Kraken controller (Kraken 4.3): steady user traffic through a load balancer, the
weights shifted toward the system under test while its health metrics allow.

Each sample interval (the engine's ``--interval-ms``) it scrapes the servers' ``/metrics``
into a :class:`~hairline.kraken.series.SeriesStore`, takes the users' latency from the
engine's interval, and evaluates every health metric; each control interval it levels them
over their windows (:func:`~hairline.kraken.health.level_of`), asks
:func:`~hairline.kraken.control.decide` and sets the weights. A watchdog process holds the
original weights from before the first change; the controller puts them back itself on
every path (a stop, a fault, SIGINT/SIGTERM) and only then tells the watchdog ``done``. The
putting back runs whole whatever signal comes meanwhile (kit/interrupts.deferred): a second
Ctrl-C is remembered, and the next phase ends at its first sample.
"""

from __future__ import annotations

import math
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from hairline.collect.prometheus import parse_text
from hairline.engine import ControlledLoad, IntervalStats
from hairline.errors import HairlineError, LoadBalancerError
from hairline.kit import interrupts
from hairline.kraken.control import Assessment, ControlState, Decision, Policy, decide
from hairline.kraken.health import HealthMetric, Level, level_of
from hairline.kraken.promql import evaluate
from hairline.kraken.results import (
    Counters,
    PhaseResult,
    ServerCapacity,
    ServerReading,
    Step,
    TestSample,
    breakdown_of,
    counters_of,
    find_bottleneck,
    mean_breakdown,
    measured_capacity,
    server_capacity,
    stamping_of,
    sustained_per_s,
)
from hairline.kraken.series import SeriesStore
from hairline.kraken.watchdog import Watchdog
from hairline.lb.balancer import LbSpec, LoadBalancer, share_of, weights_for_share
from hairline.lb.factory import open_balancer

__all__ = ["Controller", "PhaseSpec"]

_SCRAPE_TIMEOUT_S = 2.0
#: A server test stops as soon as a server's queueing is seen not to be measured (too many
#: requests without a kernel receive timestamp), once it timed this many requests: pushing
#: the server on toward a crossing that would come late says nothing, and a few hundred
#: requests after the first are enough to tell a kernel that stamps from one that does not.
_MIN_QUEUED_TO_REFUSE = 1000


@dataclass(frozen=True)
class PhaseSpec:
    """One controlled test. ``drained`` servers get weight 0 for its length (the other
    servers of a cluster while its first server is tested alone)."""

    kind: Literal["cluster", "server"]
    servers: tuple[str, ...]
    health: tuple[HealthMetric, ...]
    policy: Policy
    control_interval_s: float
    sample_interval_s: float
    max_duration_s: float
    start_share: float | None = None
    drained: tuple[str, ...] = ()
    queue_limit_ms: float = 20.0


def engine_value(key: str, interval: IntervalStats) -> float | None:
    """An "engine" entity's value in one interval, over all of the users' traffic."""
    requests = sum(t.requests for t in interval.targets.values())
    if key == "achieved_rate_per_s":
        return sum(t.achieved_rate_per_s for t in interval.targets.values())
    if key == "error_rate":
        errors = sum(t.errors for t in interval.targets.values())
        return errors / requests if requests else None
    field_name = {"p50_ms": "p50_us", "p99_ms": "p99_us", "p999_ms": "p999_us"}[key]
    # One target ("users"); with several, the worst is what some users see.
    values = [getattr(t, field_name, math.nan) for t in interval.targets.values()]
    finite = [v / 1000.0 for v in values if not math.isnan(v)]
    return max(finite) if finite else None


@dataclass
class _Scrapes:
    """The latest counters per server, to take each sample's differences from."""

    at_s: float = 0.0
    counters: dict[str, Counters] = field(default_factory=dict)


@dataclass
class Controller:
    """Runs phases against one load balancer while ``load`` sends the users' traffic. The
    balancer is built from ``balancer`` by :func:`~hairline.lb.factory.open_balancer`, here
    and in the watchdog's process: nothing here knows which kind it is."""

    balancer: LbSpec
    metrics_urls: Mapping[str, str]
    load: ControlledLoad
    on_step: Callable[[Step], None] = lambda step: None
    watchdog_log: Path | None = None
    clock: Callable[[], float] = time.monotonic
    lb: LoadBalancer = field(init=False)

    def __post_init__(self) -> None:
        self.lb = open_balancer(self.balancer)

    def run(self, spec: PhaseSpec) -> PhaseResult:
        original = self.lb.weights()
        unknown = [s for s in (*spec.servers, *spec.drained) if s not in original]
        if unknown:
            raise LoadBalancerError(
                f"{self.lb.describe()} has no server {', '.join(unknown)} "
                f"(it has {', '.join(original)})",
                hint="name the backend's servers in the kraken file's [test] servers",
            )
        others = {
            s: w for s, w in original.items() if s not in spec.servers and s not in spec.drained
        }
        start = (
            spec.start_share if spec.start_share is not None else share_of(original, spec.servers)
        )
        run = _Run(self, spec, original, others, start)
        silence_s = 3 * spec.control_interval_s
        with Watchdog(
            self.balancer, original, silence_s=silence_s, log_path=self.watchdog_log
        ) as dog:
            try:
                run.loop(dog)
            except KeyboardInterrupt:
                run.abort("interrupted (SIGINT or SIGTERM)")
            except HairlineError as err:
                run.abort(f"fault: {err.message}")
            finally:
                with interrupts.deferred():
                    try:
                        self.lb.set_weights(original)
                    except HairlineError as err:
                        # The watchdog tries again for a while when its pipe closes below.
                        run.notes.append(f"restoring the weights failed: {err.message}")
                    else:
                        run.restored = True
                        dog.done()
        return run.result()


@dataclass
class _Run:
    """The state of one phase while it runs."""

    controller: Controller
    spec: PhaseSpec
    original: Mapping[str, int]
    #: The servers that take what the servers under test do not, with their weights.
    others: Mapping[str, int]
    share: float
    samples: list[TestSample] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    history: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)
    stopped_by: str = ""
    stop_metric: str | None = None
    aborted: bool = False
    restored: bool = False
    notes: list[str] = field(default_factory=list)

    def abort(self, why: str) -> None:
        self.aborted = True
        self.stopped_by = why

    @property
    def scraped(self) -> tuple[str, ...]:
        named = [m.server for m in self.spec.health if m.server is not None]
        return tuple(dict.fromkeys([*self.spec.servers, *(s for s in named if s)]))

    def weights_for(self, share: float) -> dict[str, int]:
        weights = (
            weights_for_share(self.spec.servers, self.others, share)
            if self.others
            else (dict.fromkeys(self.spec.servers, self.original[self.spec.servers[0]] or 1))
        )
        return {**weights, **dict.fromkeys(self.spec.drained, 0)}

    def loop(self, dog: Watchdog) -> None:
        spec, ctl = self.spec, self.controller
        policy = spec.policy if self.others else replace(spec.policy, max_share=self.share)
        state = ControlState(share=self.share)
        weights = self.weights_for(self.share)
        ctl.lb.set_weights(weights)
        store = SeriesStore(
            retention_s=max([m.time_window_s for m in spec.health] + [10.0]) + 10.0,
            stale_after_s=max(10.0, 4 * spec.sample_interval_s),
        )
        self.history = {m.name: [] for m in spec.health}
        scrapes = _Scrapes(at_s=ctl.clock(), counters=self.scrape(store, ctl.clock()))
        t0 = last_control = ctl.clock()
        window: list[TestSample] = []
        timeout_s = 5 * spec.sample_interval_s + 5.0
        for interval in ctl.load.intervals(timeout_s=timeout_s):
            # A Ctrl-C Python dropped where it landed, or one that came while the weights
            # of the phase before went back, ends the phase here.
            interrupts.raise_if_interrupted()
            now = ctl.clock()
            sample = self.sample(interval, store, scrapes, now, t0)
            self.samples.append(sample)
            window.append(sample)
            dog.beat()
            if now - last_control >= spec.control_interval_s - spec.sample_interval_s / 2:
                last_control = now
                assessed = self.assess(now)
                decision = decide(state, assessed, policy)
                step = self.step(now - t0, decision, assessed, window, weights)
                window = []
                if decision.action in ("stop", "abort"):
                    self.steps.append(step)
                    ctl.on_step(step)
                    self.aborted = decision.action == "abort"
                    self.stopped_by, self.stop_metric = decision.reason, decision.metric
                    return
                state, self.share = decision.state, decision.share
                weights = self.weights_for(self.share)
                ctl.lb.set_weights(weights)
                step = replace(step, weights=weights)
                self.steps.append(step)
                ctl.on_step(step)
                capacities = self.server_capacities()
                if spec.kind == "server" and all(c.capacity_per_s is not None for c in capacities):
                    self.stopped_by = (
                        f"every server's queueing delay reached {spec.queue_limit_ms:g} ms"
                    )
                    return
                refused = [
                    c
                    for c in capacities
                    if c.queueing_unmeasured and c.queued >= _MIN_QUEUED_TO_REFUSE
                ]
                if spec.kind == "server" and refused:
                    self.stopped_by = f"{refused[0].server}'s {refused[0].queueing_unmeasured}"
                    return
            if now - t0 >= spec.max_duration_s:
                self.stopped_by = f"max_duration_s ({spec.max_duration_s:g} s) reached"
                return
        self.abort("fault: the engine stopped sending the users' traffic")

    def scrape(self, store: SeriesStore, at_s: float) -> dict[str, Counters]:
        found: dict[str, Counters] = {}
        for server in self.scraped:
            url = self.controller.metrics_urls.get(server)
            if url is None:
                continue
            try:
                with urllib.request.urlopen(url, timeout=_SCRAPE_TIMEOUT_S) as response:
                    text = response.read().decode("utf-8", errors="replace")
            except OSError:
                # No sample this time; a metric left without samples aborts the test.
                continue
            store.add_scrape(server, at_s, text)
            found[server] = counters_of(parse_text(text))
        return found

    def sample(
        self,
        interval: IntervalStats,
        store: SeriesStore,
        scrapes: _Scrapes,
        now: float,
        t0: float,
    ) -> TestSample:
        spec = self.spec
        counters = self.scrape(store, now)
        elapsed_s = now - scrapes.at_s
        both = [s for s in spec.servers if s in counters and s in scrapes.counters]
        served, breakdown = (None, None)
        if len(both) == len(spec.servers):
            served, breakdown = breakdown_of(
                [scrapes.counters[s] for s in both], [counters[s] for s in both], elapsed_s
            )
        readings = {}
        for server in spec.servers:
            if server in both:
                rate, own = breakdown_of([scrapes.counters[server]], [counters[server]], elapsed_s)
                queued, unstamped = stamping_of(scrapes.counters[server], counters[server])
                readings[server] = ServerReading(
                    rate, own.queue_ms if own else None, queued, unstamped
                )
            else:
                readings[server] = ServerReading(None, None)
        scrapes.at_s, scrapes.counters = now, counters
        values: dict[str, float | None] = {}
        for metric in spec.health:
            value = self.value(metric, interval, store, now)
            values[metric.name] = value
            self.history[metric.name].append((now, value))
        p99 = engine_value("p99_ms", interval)
        return TestSample(
            t_s=now - t0,
            share=self.share,
            served_per_s=served,
            breakdown=breakdown,
            servers=readings,
            user_rate_per_s=engine_value("achieved_rate_per_s", interval) or 0.0,
            user_p99_ms=math.nan if p99 is None else p99,
            values=values,
        )

    def value(
        self, metric: HealthMetric, interval: IntervalStats, store: SeriesStore, now: float
    ) -> float | None:
        if metric.entity == "engine":
            return engine_value(metric.key, interval)
        assert metric.query is not None
        instances = (metric.server,) if metric.server else self.spec.servers
        return evaluate(metric.query, store, now, instances)

    def assess(self, now: float) -> list[Assessment]:
        out = []
        # Half a sample of slack, so that a window holds time_window_s / sample_interval_s
        # samples whatever the jitter of the sampling clock.
        slack_s = self.spec.sample_interval_s / 2
        for metric in self.spec.health:
            recent = [
                v
                for t, v in self.history[metric.name]
                if t > now - metric.time_window_s + slack_s and v is not None
            ]
            out.append(
                Assessment(
                    metric=metric.name,
                    level=level_of(metric, recent),
                    value=recent[-1] if recent else None,
                    threshold=metric.threshold,
                )
            )
        return out

    def step(
        self,
        t_s: float,
        decision: Decision,
        assessed: Sequence[Assessment],
        window: Sequence[TestSample],
        weights: Mapping[str, int],
    ) -> Step:
        served = [s.served_per_s for s in window if s.served_per_s is not None]
        servers = {}
        for server in self.spec.servers:
            rates = [r for s in window if (r := s.servers[server].served_per_s) is not None]
            queues = [q for s in window if (q := s.servers[server].queue_ms) is not None]
            queued = [n for s in window if (n := s.servers[server].queued) is not None]
            unstamped = [n for s in window if (n := s.servers[server].unstamped) is not None]
            servers[server] = ServerReading(
                sum(rates) / len(rates) if rates else None,
                sum(queues) / len(queues) if queues else None,
                # Counts, so the interval's are the sum of its samples'.
                sum(queued) if queued else None,
                sum(unstamped) if unstamped else None,
            )
        user_rate = sum(s.user_rate_per_s for s in window) / len(window) if window else 0.0
        return Step(
            t_s=t_s,
            share=self.share,
            next_share=decision.share,
            weights=dict(weights),
            action=decision.action,
            step=decision.step,
            reason=decision.reason,
            metric=decision.metric,
            levels={a.metric: None if a.level is None else Level(a.level).name for a in assessed},
            values={a.metric: a.value for a in assessed},
            served_per_s=sum(served) / len(served) if served else None,
            offered_per_s=self.share * user_rate,
            breakdown=mean_breakdown([s.breakdown for s in window]),
            servers=servers,
            healthy=all(
                a.level is not None
                and a.level < Level.BACKOFF
                and a.value is not None
                and a.value < m.ranges[Level.BACKOFF][0]
                for a, m in zip(assessed, self.spec.health, strict=True)
            ),
        )

    def server_capacities(self) -> tuple[ServerCapacity, ...]:
        return tuple(
            server_capacity(
                server, [s.servers[server] for s in self.steps], self.spec.queue_limit_ms
            )
            for server in self.spec.servers
        )

    def queueing_notes(self, capacities: Sequence[ServerCapacity]) -> list[str]:
        """The mark on every figure made of a server's queueing delay when it was not
        measured: a server test's capacity is refused; a cluster test's queueing (the
        breakdown's queue, any health metric on sample_queue_seconds) reads low."""
        consequence = (
            "no capacity by queueing delay"
            if self.spec.kind == "server"
            else "its queueing delays here (the breakdown's queue, health metrics on "
            "sample_queue_seconds) are timed from the read and read low"
        )
        return [
            f"{c.server}'s {c.queueing_unmeasured}: {consequence}"
            for c in capacities
            if c.queueing_unmeasured
        ]

    def result(self) -> PhaseResult:
        spec = self.spec
        capacities = self.server_capacities()
        best = measured_capacity(self.steps)
        if spec.kind == "server":
            found = [c.capacity_per_s for c in capacities if c.capacity_per_s is not None]
            capacity = sum(found) / len(found) if found else None
        else:
            capacity = sustained_per_s(best) if best is not None else None
        # Figure 8b: from the test's start to its end, where the bottleneck shows most.
        measured = [s.breakdown for s in self.steps if s.breakdown is not None]
        start, end = (measured[0], measured[-1]) if measured else (None, None)
        return PhaseResult(
            kind=spec.kind,
            servers=spec.servers,
            original_weights=dict(self.original),
            samples=tuple(self.samples),
            steps=tuple(self.steps),
            stopped_by=self.stopped_by,
            stop_metric=self.stop_metric,
            aborted=self.aborted,
            restored=self.restored,
            capacity_per_s=capacity,
            server_capacities=capacities,
            # A server alone is tested below what any shared dependency could limit.
            bottleneck=find_bottleneck(start, end) if spec.kind == "cluster" else None,
            notes=(*self.notes, *self.queueing_notes(capacities)),
            metric_ranges={m.name: m.ranges for m in spec.health},
        )
