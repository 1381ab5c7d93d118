"""The search for the highest rate a service sustains under its SLO (capacity mode).

Pure: a probe is a callback ``probe(rate_per_s, duration_s) -> Probe`` that the caller
runs against a real service (lab/capacity.py) or a simulation (the tests, the benchmark).

:func:`search_capacity` follows MLRsearch's idea (RFC draft "Multiple Loss Ratio Search"):
short probes are cheap and find the knee, long ones confirm it. Short probes are
optimistic (a queue that grows without bound has had less time to grow), so a short
failure is trusted and a short pass is not: the result is always a rate that passed at
full duration. A failed confirmation lowers the upper bound to that rate and the search
starts again below it with longer probes, so that each round is less optimistic.

:func:`bisect_capacity` is the baseline: mutilate's ``--search``, plain bisection with
every probe at full duration.

A probe the engine marks invalid (its generator fell behind or dropped sends) ends the
search at once with ``stopped_by="generator"``: the rate it failed at says nothing about
the service.

The rates a search tries form a grid fixed by its start rate (start x growth^k, then
geometric midpoints), so a knee that stays inside one cell reads the same rate every time:
the reading's error is then the same in every trial and a paired test sees no spread at
all. :func:`dithered` moves the grid by a fraction of one growth step (a dither), which the
lab draws per arm and batch, so that the error is uniform over the cell and independent
between readings and the trials' spread includes the search's resolution.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Probe",
    "ProbeFn",
    "SearchOutcome",
    "SearchSettings",
    "StoppedBy",
    "bisect_capacity",
    "dithered",
    "probe_failure",
    "search_capacity",
]


@dataclass(frozen=True)
class Probe:
    """One step of the search: the offered rate held for ``duration_s`` and what came back.

    ``valid`` is False when the load generator, not the service, failed to keep the rate
    (``IntervalStats.generator_saturated``); ``note`` says why, or anything else worth
    showing beside the point on the curve.
    """

    rate_per_s: float
    duration_s: float
    served_per_s: float
    p99_ms: float
    error_rate: float
    cpu_utilization: float | None
    valid: bool
    note: str = ""


ProbeFn = Callable[[float, float], Probe]

# "slo": the knee found to the tolerance; "max_rate": max_rate_per_s passed at full
# duration; "min_rate": even min_rate_per_s broke the SLO; "generator": the load generator
# could not keep a probe's rate (the batch is spoiled); "probes": max_probes ran out.
StoppedBy = Literal["slo", "max_rate", "min_rate", "generator", "probes"]


@dataclass(frozen=True)
class SearchSettings:
    """What the service must meet at a rate, and how finely to look for the highest.

    ``confirm_s`` is the full duration (the experiment's ``[load] duration_s``); ``probe_s``
    the short probes' duration; ``tolerance`` the relative width of the final bracket.
    """

    slo_p99_ms: float
    start_rate_per_s: float
    confirm_s: float
    probe_s: float = 1.0
    tolerance: float = 0.02
    max_error_rate: float = 0.01
    max_cpu_utilization: float | None = None
    max_rate_per_s: float | None = None
    min_rate_per_s: float = 1.0
    growth: float = 2.0
    max_probes: int = 60


@dataclass(frozen=True)
class SearchOutcome:
    """The highest rate that passed at full duration (0 when none did), every probe in
    the order run, and the seconds of load they took."""

    max_rate_per_s: float
    probes: tuple[Probe, ...]
    load_s: float
    stopped_by: StoppedBy

    @property
    def spoiled(self) -> bool:
        """The result is not the service's capacity (a batch to run again)."""
        return self.stopped_by in ("generator", "probes")


def dithered(settings: SearchSettings, fraction: float) -> SearchSettings:
    """``settings`` with the start rate moved by ``growth ** (fraction - 0.5)``: a
    ``fraction`` uniform on [0, 1) moves every rate of the search's grid by a uniform
    fraction of its cell (one growth step in log terms holds a whole number of cells of
    every finer step). Centred on the start rate so that a start chosen just below the
    knee stays close to it. Pure."""
    assert 0.0 <= fraction < 1.0
    start = settings.start_rate_per_s * settings.growth ** (fraction - 0.5)
    return dataclasses.replace(settings, start_rate_per_s=max(start, settings.min_rate_per_s))


def probe_failure(probe: Probe, settings: SearchSettings) -> str | None:
    """Why ``probe`` broke the SLO, or None when it met it."""
    if not (probe.p99_ms <= settings.slo_p99_ms):  # NaN: nothing answered
        return f"p99 {probe.p99_ms:.3g} ms > {settings.slo_p99_ms:g} ms"
    if probe.error_rate > settings.max_error_rate:
        return f"error rate {probe.error_rate:.3g} > {settings.max_error_rate:g}"
    limit = settings.max_cpu_utilization
    if limit is not None and probe.cpu_utilization is not None and probe.cpu_utilization > limit:
        return f"CPU utilization {probe.cpu_utilization:.3g} > {limit:g}"
    return None


class _OutOfProbes(Exception):
    pass


class _GeneratorSaturated(Exception):
    pass


class _Runner:
    """Runs probes, keeps them, and stops the search on an invalid one or at the limit."""

    def __init__(self, probe: ProbeFn, settings: SearchSettings) -> None:
        self._probe = probe
        self._settings = settings
        self.probes: list[Probe] = []

    def passes(self, rate_per_s: float, duration_s: float) -> bool:
        if len(self.probes) >= self._settings.max_probes:
            raise _OutOfProbes
        result = self._probe(rate_per_s, duration_s)
        self.probes.append(result)
        if not result.valid:
            raise _GeneratorSaturated
        return probe_failure(result, self._settings) is None

    def outcome(self, max_rate_per_s: float, stopped_by: StoppedBy) -> SearchOutcome:
        return SearchOutcome(
            max_rate_per_s=max_rate_per_s,
            probes=tuple(self.probes),
            load_s=sum(p.duration_s for p in self.probes),
            stopped_by=stopped_by,
        )


def _check(settings: SearchSettings) -> None:
    # Programming errors: the lab's config checks give users the field-naming messages.
    assert settings.start_rate_per_s > 0 and settings.confirm_s > 0 and settings.probe_s > 0
    assert 0 < settings.tolerance < 1 and settings.growth > 1


def search_capacity(probe: ProbeFn, settings: SearchSettings) -> SearchOutcome:
    """Short probes bracket the knee and narrow it to ``tolerance``; a full-duration probe
    confirms the bracket's low end. A failed confirmation becomes the new upper bound and
    the next round, with probes twice as long, looks below it."""
    _check(settings)
    run = _Runner(probe, settings)
    cap = settings.max_rate_per_s or math.inf
    floor = settings.min_rate_per_s
    hi = math.inf  # the lowest rate that failed (a short failure is trusted)
    rate = min(settings.start_rate_per_s, cap)
    # How far each step of the bracketing moves, as a ratio: wide at first, narrow after a
    # failed confirmation (the knee is known to be just below it).
    step = settings.growth
    duration_s = min(settings.probe_s, settings.confirm_s)
    # Nothing has passed at full duration before a round returns: a spoiled search has no
    # result.
    try:
        while True:
            lo, hi = _bracket(run, rate, hi, step, settings.growth, duration_s, cap, floor)
            if lo == 0.0:
                return run.outcome(0.0, "min_rate")
            while hi < math.inf and hi / lo - 1 > settings.tolerance:
                mid = math.sqrt(lo * hi)
                if run.passes(mid, duration_s):
                    lo = mid
                else:
                    hi = mid
            if duration_s >= settings.confirm_s or run.passes(lo, settings.confirm_s):
                return run.outcome(lo, "max_rate" if lo >= cap else "slo")
            hi = lo
            if hi <= floor * (1 + settings.tolerance):
                return run.outcome(0.0, "min_rate")
            rate = max(hi / (1 + 2 * settings.tolerance), floor)
            step = 1 + 2 * settings.tolerance
            duration_s = min(2 * duration_s, settings.confirm_s)
    except _GeneratorSaturated:
        return run.outcome(0.0, "generator")
    except _OutOfProbes:
        return run.outcome(0.0, "probes")


def _bracket(
    run: _Runner,
    rate: float,
    hi: float,
    step: float,
    max_step: float,
    duration_s: float,
    cap: float,
    floor: float,
) -> tuple[float, float]:
    """From ``rate``, find a passing ``lo`` and a failing ``hi`` (``inf`` when ``cap``
    passes; ``hi`` may come in known). Each further step in the same direction is twice
    as large in log terms, up to ``max_step``. ``lo`` is 0.0 when even ``floor`` fails."""
    lo = 0.0
    while True:
        if run.passes(rate, duration_s):
            lo = max(lo, rate)
            if rate >= cap:
                return lo, math.inf
            if hi < math.inf:
                return lo, hi
            rate = min(rate * step, cap)
        else:
            hi = min(hi, rate)
            if lo > 0.0:
                return lo, hi
            if rate <= floor:
                return 0.0, hi
            rate = max(rate / step, floor)
        step = min(step * step, max_step)


def bisect_capacity(probe: ProbeFn, settings: SearchSettings) -> SearchOutcome:
    """The baseline (mutilate's ``--search``): every probe at full duration; double the
    rate from the start until it fails (or halve until it passes), then bisect to
    ``tolerance``."""
    _check(settings)
    run = _Runner(probe, settings)
    full = settings.confirm_s
    cap = settings.max_rate_per_s or math.inf
    try:
        lo, hi = _bracket(
            run,
            min(settings.start_rate_per_s, cap),
            math.inf,
            settings.growth,
            settings.growth,
            full,
            cap,
            settings.min_rate_per_s,
        )
        if lo == 0.0:
            return run.outcome(0.0, "min_rate")
        while hi < math.inf and hi / lo - 1 > settings.tolerance:
            mid = (lo + hi) / 2
            if run.passes(mid, full):
                lo = mid
            else:
                hi = mid
    except _GeneratorSaturated:
        return run.outcome(0.0, "generator")
    except _OutOfProbes:
        return run.outcome(0.0, "probes")
    return run.outcome(lo, "max_rate" if lo >= cap else "slo")
