"""Capacity mode's PID search (``[mode] search = "pid"``): each arm's ``--control`` run is
driven by the PID controller of capacity/pid.py to the rate at which its latency meets the
target (the p99 against ``slo_p99_ms``, or the mean against ``target_latency_ms``), as
HHVM's autotuning drives each cluster to its target latency (section 5.1).

Everything but the search is capacity mode's (lab/capacity.py): the arms, the threads, the
row ``max_throughput_per_s`` and the curve file. Every ``UPDATE_INTERVALS`` engine
intervals the controller reads their latency and sets the next rate; once it has settled it
keeps control for ``[load] duration_s`` more, and the mean rate offered over that hold is
the arm's capacity. An update whose sends the generator could not keep is left out (the
rate stays); ``MAX_BEHIND_UPDATES`` of them in a row spoil the batch. Each update is
written as a point of the curve (a ``Probe``; those of the hold say so in their note), so
the report draws the trajectory.

The outcome is capacity mode's ``SearchOutcome``: ``stopped_by`` is "slo" when it settled
at the target, "max_rate"/"min_rate" when it settled at a bound (no capacity at the
lowest), "generator" when the load generator could not keep a rate, and "probes" when it
did not settle within ``MAX_SETTLE_S`` (the batch is then run again, as a spoiled search
is).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Literal

from hairline import engine
from hairline.capacity.pid import PidSettings, PidState, settled, settled_rate, start, step
from hairline.capacity.search import Probe, SearchOutcome, SearchSettings, StoppedBy
from hairline.config import ExperimentConfig
from hairline.lab.capacity import (
    DEFAULT_START_RATE_PER_S,
    INTERVAL_MS,
    SETTLE_S,
    CapacityBatch,
    capacity_settings,
    probe_of,
)

__all__ = [
    "HOLDING",
    "MAX_BEHIND_UPDATES",
    "MAX_SETTLE_S",
    "UPDATE_INTERVALS",
    "capacity_batch",
    "drive_pid",
    "mean_latency_ms",
    "pid_settings",
]

# Two 250 ms intervals per update: one interval's p99 at ~3,000/s rests on its 7 slowest
# answers, too few to steer by; more would slow the climb.
UPDATE_INTERVALS = 2
# A controller that has not settled by then is not going to: the batch is spoiled.
MAX_SETTLE_S = 60.0
# Updates in a row whose sends the generator could not keep before the batch is spoiled:
# one such update on a busy 2-CPU VM happened at a third of the knee.
MAX_BEHIND_UPDATES = 3
# The note of the curve's points measured while holding the settled rate.
HOLDING = "holding at the settled rate"
# Without [mode] max_rate_per_s the rate is bounded only by what a generator could send.
_MAX_RATE_PER_S = 1e6

Target = Literal["p99", "mean"]


def pid_settings(config: ExperimentConfig) -> PidSettings:
    """The controller's settings from an experiment file with ``search = "pid"``. Pure."""
    mode = config.mode
    target_ms = mode.target_latency_ms if mode.target == "mean" else mode.slo_p99_ms
    assert target_ms is not None  # config/checks.py requires the target
    start_rate = mode.start_rate_per_s or config.load.rate_per_s or DEFAULT_START_RATE_PER_S
    return PidSettings(
        target_latency_ms=target_ms,
        start_rate_per_s=start_rate,
        min_rate_per_s=min(1.0, start_rate),
        max_rate_per_s=max(mode.max_rate_per_s or _MAX_RATE_PER_S, start_rate),
    )


def capacity_batch(config: ExperimentConfig) -> CapacityBatch:
    """Capacity mode's ``RunPlan.measure`` for the file's search: probes or the PID."""
    settings = capacity_settings(config)
    if config.mode.search != "pid":
        return CapacityBatch(settings)
    pid, target = pid_settings(config), config.mode.target

    def drive(
        load: engine.ControlledLoad,
        settings: SearchSettings,
        cpu_ns: Callable[[], int] | None,
        cpus: int,
    ) -> SearchOutcome:
        return drive_pid(load.intervals(timeout_s=10.0), load.set_rate, settings, pid, target)

    return CapacityBatch(settings, drive=drive)


def mean_latency_ms(intervals: Sequence[engine.IntervalStats]) -> float:
    """The intervals' mean latency over all their responses (NaN when none). Pure."""
    answered = [
        t for i in intervals for t in i.targets.values() if t.requests and not math.isnan(t.mean_us)
    ]
    weight = sum(t.requests for t in answered)
    return sum(t.mean_us * t.requests for t in answered) / weight / 1000 if weight else math.nan


def drive_pid(
    intervals: Iterator[engine.IntervalStats],
    set_rate: Callable[[float], None],
    settings: SearchSettings,
    pid: PidSettings,
    target: Target,
) -> SearchOutcome:
    """The PID loop over a running ``--control`` load: ``intervals`` as the engine reports
    them, ``set_rate`` to move it. Settles, then holds for ``settings.confirm_s``."""
    for _ in range(round(SETTLE_S * 1000 / INTERVAL_MS)):  # connections opening
        next(intervals)
    state = start(pid)
    set_rate(state.rate_per_s)
    dt_s = UPDATE_INTERVALS * INTERVAL_MS / 1000
    probes: list[Probe] = []
    holding, behind = False, 0
    hold_rates: list[float] = []
    hold_updates = max(1, math.ceil(settings.confirm_s / dt_s))
    stopped_by: StoppedBy = "probes"
    while len(hold_rates) < hold_updates:
        if not holding and len(probes) * dt_s >= MAX_SETTLE_S:
            break
        got = [next(intervals) for _ in range(UPDATE_INTERVALS)]
        probe = probe_of(got, state.rate_per_s, None)
        if holding:
            probe = replace(probe, note=probe.note or HOLDING)
        probes.append(probe)
        if not probe.valid:
            # The generator, not the service, missed the rate: this update says nothing,
            # so the rate stays; a generator that keeps missing spoils the batch.
            behind += 1
            if behind >= MAX_BEHIND_UPDATES:
                stopped_by = "generator"
                break
            continue
        behind = 0
        if holding:
            hold_rates.append(probe.rate_per_s)
        state, rate = step(state, _measured(probe, got, settings, target), dt_s)
        set_rate(rate)
        holding = holding or settled(state)
    else:
        stopped_by = _settled_by(state)
    # As the probe search's: no capacity unless it settled above the lowest rate.
    found = stopped_by in ("slo", "max_rate")
    sustained = sum(hold_rates) / len(hold_rates) if found else 0.0
    return SearchOutcome(
        max_rate_per_s=sustained,
        probes=tuple(probes),
        load_s=sum(p.duration_s for p in probes),
        stopped_by=stopped_by,
    )


def _measured(
    probe: Probe,
    intervals: Sequence[engine.IntervalStats],
    settings: SearchSettings,
    target: Target,
) -> float:
    # Errors over the limit count as nothing answered: the rate must come down whatever
    # the latency of the requests that did get answers.
    if probe.error_rate > settings.max_error_rate:
        return math.nan
    return probe.p99_ms if target == "p99" else mean_latency_ms(intervals)


def _settled_by(state: PidState) -> StoppedBy:
    rate, s = settled_rate(state), state.settings
    if rate >= s.max_rate_per_s * (1 - s.settle_band):
        return "max_rate"
    if rate <= s.min_rate_per_s * (1 + s.settle_band):
        return "min_rate"
    return "slo"
