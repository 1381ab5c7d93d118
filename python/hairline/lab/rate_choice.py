"""Which load to run the trials at when the file names none: the candidate rate at which the
deciding metric was most precise per minute in short paired A/A steps. Pure.

Calibration (lab/calibrate.py) finds the highest rate this lab serves with every gate
holding, then runs a few short steps at each of a few candidate rates below it, a copy of the
baseline on each host replayed to in lockstep as in a batch. One step gives the two copies'
values of the deciding metric; their log ratio ``d`` is the step's host difference. A trial
swaps the arms between its two batches, so an A/A trial's effect is half the change of
``d`` from one batch to the next (the hosts' offset cancels): consecutive steps are such a
trial in miniature, and the spread of ``(d[i] - d[i+1]) / 2`` is the noise a trial at that
rate carries (lab/sensitivity.py measures the same quantity over real trials).

Trials last the file's ``duration_s`` at any rate, so the rate that is most precise per
trial is the most precise per minute; the score is the variance of that effect times the
time it took (two steps), lower is better. A variance below ``NOISE_FLOOR`` counts as the
floor, so that a few lucky steps cannot make a rate look more precise than steps can show;
among rates equal at the floor the lowest wins (headroom for a costlier candidate build). A
rate at which any step failed a gate or left a host past its limit is never chosen.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from hairline.collect.summary import CPU_PER_REQUEST, LATENCY_P50, LATENCY_P99

__all__ = [
    "AA_STEPS",
    "AA_STEP_S",
    "MEASURABLE_METRICS",
    "MIN_STEPS",
    "NOISE_FLOOR",
    "STRAY",
    "CandidateRate",
    "RateChoice",
    "calibration_metric",
    "choose_rate",
    "paired_noise",
]

#: The metrics a calibration step measures: the copies' cgroup CPU over the requests they
#: served, and the engine's latency percentiles per copy (runner.py's rows of the same names).
MEASURABLE_METRICS = (CPU_PER_REQUEST.name, LATENCY_P50.name, LATENCY_P99.name)
#: A relative standard deviation per trial below this is not told apart from it (0.1%):
#: six one-second steps cannot show better, and the demo's noise is ten times that.
NOISE_FLOOR = 0.001
#: A candidate needs this many steps (three paired differences) to be ranked.
MIN_STEPS = 4
#: Steps per candidate and their length: three candidates' steps take about 25 s, with the
#: ramp before them 35 to 45 s on the sample service.
AA_STEPS, AA_STEP_S = 8, 1.0
#: A step this many of its standard deviations from the median is a stray (see
#: :func:`paired_noise`).
STRAY = 4.0
# The median of |Z| for a standard normal Z.
_HALF_NORMAL_MEDIAN = 0.6744897501960817


@dataclass(frozen=True)
class CandidateRate:
    """One candidate rate's A/A steps: how busy the baseline was (mean over the steps), how
    many steps ran, the relative standard deviation of a trial's effect they show (None when
    a step failed or too few ran), whether every step passed, and what failed if not."""

    rate_per_s: float
    utilization: float
    steps: int
    sd_per_trial: float | None
    passed: bool
    note: str = ""
    host_differences: tuple[float, ...] = ()
    """Each step's log ratio of copy 0's value to copy 1's, for the record."""


@dataclass(frozen=True)
class RateChoice:
    """The rate chosen, the candidate it came from, and why, in a sentence."""

    rate_per_s: float
    candidate: CandidateRate
    reason: str


def calibration_metric(decide_on: Sequence[str]) -> tuple[str, str]:
    """The metric calibration scores rates on: the first deciding metric a step can measure,
    else CPU per request; and a note when it is not the first deciding one."""
    for metric in decide_on:
        if metric in MEASURABLE_METRICS:
            note = "" if metric == decide_on[0] else f"{decide_on[0]} is not measured per step"
            return metric, note
    return CPU_PER_REQUEST.name, (
        f"{', '.join(decide_on)} {'is' if len(decide_on) == 1 else 'are'} not measured per "
        f"step; scored on {CPU_PER_REQUEST.name}"
    )


def paired_noise(differences: Sequence[float]) -> float | None:
    """The relative standard deviation of an A/A trial's effect from consecutive steps' host
    differences ``differences`` (log ratios of copy 0's value to copy 1's): the root mean
    square of the halves ``(d[i] - d[i+1]) / 2``, whose mean is zero in an A/A. One stray
    step (a hiccup of the machine: it spoils both halves it is in, and six steps then read
    five times their noise) is left out first: the step farthest from the median, when it
    lies more than :data:`STRAY` of its spread away (the spread read from the halves'
    median size, which one step cannot move; normal noise goes that far once in 15,000
    steps). None below :data:`MIN_STEPS` steps or when a value is not finite."""
    if len(differences) < MIN_STEPS or not all(math.isfinite(d) for d in differences):
        return None
    steps = list(differences)
    middle = statistics.median(steps)
    halves = [abs(a - b) / 2 for a, b in itertools.pairwise(steps)]
    # A step's own spread: sqrt(2) times a half's, whose median size is 0.6745 of its sd.
    spread = math.sqrt(2) * statistics.median(halves) / _HALF_NORMAL_MEDIAN
    farthest = max(range(len(steps)), key=lambda i: abs(steps[i] - middle))
    if len(steps) > MIN_STEPS and abs(steps[farthest] - middle) > STRAY * spread:
        del steps[farthest]
    halves = [(a - b) / 2 for a, b in itertools.pairwise(steps)]
    return math.sqrt(sum(h * h for h in halves) / len(halves))


def _score(candidate: CandidateRate, step_s: float) -> float:
    """Variance of a trial's effect times a trial's time (two steps): lower is better."""
    sd = math.inf if candidate.sd_per_trial is None else max(candidate.sd_per_trial, NOISE_FLOOR)
    return sd * sd * 2 * step_s


def choose_rate(
    candidates: Sequence[CandidateRate], *, metric: str, step_s: float
) -> RateChoice | None:
    """The most precise candidate per minute that passed; None when none did."""
    ranked = [c for c in candidates if c.passed and c.sd_per_trial is not None]
    if not ranked:
        return None
    best = min(ranked, key=lambda c: (_score(c, step_s), c.rate_per_s))
    return RateChoice(best.rate_per_s, best, _reason(candidates, best, metric, step_s))


def _rate(rate: float) -> str:
    return f"{rate:,.0f}"


def _reason(
    candidates: Sequence[CandidateRate], best: CandidateRate, metric: str, step_s: float
) -> str:
    ranked = sorted(
        (c for c in candidates if c.passed and c.sd_per_trial is not None),
        key=lambda c: c.rate_per_s,
    )
    text = (
        f"{metric} most precise per minute of {'/'.join(_rate(c.rate_per_s) for c in ranked)}"
        f"/s (A/A sd {', '.join(f'{c.sd_per_trial:.2%}' for c in ranked)} per pair of"
        f" {step_s:g} s steps, {best.steps} steps each)"
    )
    floored = [c for c in ranked if c.sd_per_trial is not None and c.sd_per_trial <= NOISE_FLOOR]
    if len(floored) > 1:
        text += (
            f"; {len(floored)} rates at or below the {NOISE_FLOOR:.1%} floor (less than steps tell "
            "apart): the lowest of them"
        )
    left = [c for c in candidates if not c.passed or c.sd_per_trial is None]
    for c in sorted(left, key=lambda c: c.rate_per_s):
        text += f"; {_rate(c.rate_per_s)}/s left out: {c.note or 'too few steps'}"
    return text
