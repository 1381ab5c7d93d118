"""Warm-up detection with exponential moving averages (servicelab-osdi24 section 4.2, "Test
warm up time").

The paper says only this: an algorithm using exponential moving averages finds the point at
which a time series reaches approximate stationarity, observations before it are discarded,
and the point is found per trial. It gives no formula, so hairline's rule is written here.

For one trial's series x_0..x_{n-1}, in time order:

1. The EMA with smoothing a = 2/(span + 1), bias-corrected so that its first values are plain
   weighted means of the points seen so far: e_t = Σ_i w_i·x_i / Σ_i w_i, w_i = (1 - a)^(t-i).
2. The steady state is learnt from the last ``reference_fraction`` of the series (default the
   last half), which should be past warm-up: its level is the mean of those points, and its
   noise is the standard deviation of e_t there around a fitted line (measured, so
   autocorrelated noise widens the band as it should). If the line drifts across the
   reference by more than ``tolerance_sigmas`` times that noise, the series is still moving:
   the detection says ``stationary=False`` and cuts the most it may (below).
3. Early EMA values average fewer points and wander more; the band at t is
   ``tolerance_sigmas`` times that noise, scaled by sqrt(f_t / f_∞) where
   f_t = Σw_i²/(Σw_i)² is the variance factor of the weighted mean for independent noise.
4. The cut is one past the last t (within the first ``max_cut_fraction`` of the series) at
   which the EMA lies outside the band; everything from the cut on is kept. If the EMA is
   still outside at the limit, the series never settled: the cut is the limit and the
   detection says ``stationary=False``.

A stationary series keeps its EMA inside a 4-sigma band almost surely and is cut at 0. A
decaying start is cut where the EMA, which lags the series by about span/2 points, comes
within the noise of the final level.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from hairline.stats import dist
from hairline.stats._modelkit import FloatArray, warn_degenerate
from hairline.stats.data import MetricSample

__all__ = ["TrialCut", "WarmupCut", "WarmupDetection", "cut_warmup", "detect_warmup", "ema"]


@dataclass(frozen=True)
class WarmupDetection:
    """Where one series becomes stationary. ``keep`` is in the input's order."""

    cut_index: int
    cut_t_s: float | None
    keep: NDArray[np.bool_]
    stationary: bool
    level: float
    band: float
    span: int


@dataclass(frozen=True)
class TrialCut:
    """What was cut from one trial and arm."""

    trial: int | None
    arm: int
    n_cut: int
    n_total: int
    cut_t_s: float | None
    stationary: bool


@dataclass(frozen=True)
class WarmupCut:
    """A sample with every trial's warm-up removed, and what was cut per trial and arm."""

    sample: MetricSample
    cuts: tuple[TrialCut, ...]
    warnings: tuple[str, ...]

    @property
    def n_cut(self) -> int:
        return sum(cut.n_cut for cut in self.cuts)


def ema(values: FloatArray, *, span: int) -> FloatArray:
    """The bias-corrected exponential moving average with smoothing 2/(span + 1)."""
    x = np.asarray(values, dtype=np.float64)
    a = 2.0 / (span + 1.0)
    raw = dist.ema_filter(x, a)
    weights = 1.0 - (1.0 - a) ** np.arange(1, len(x) + 1)
    smoothed: FloatArray = raw / weights
    return smoothed


def _default_span(n: int) -> int:
    # About 2% of the series: smooth enough to see through per-request noise, short enough
    # to locate the end of warm-up to within a few percent of the trial.
    return max(5, n // 50)


def _validate_detect_warmup(
    x: FloatArray,
    t: FloatArray | None,
    span: int | None,
    reference_fraction: float,
    max_cut_fraction: float,
    tolerance_sigmas: float,
) -> None:
    if x.ndim != 1:
        raise ValueError("values must be a one-dimensional time series")
    if t is not None and len(t) != len(x):
        raise ValueError(f"t has {len(t)} entries, values has {len(x)}")
    if span is not None and span < 1:
        raise ValueError(f"span must be at least 1 point, got {span}")
    if not 0.0 < reference_fraction < 1.0:
        raise ValueError(f"reference_fraction must be in (0, 1), got {reference_fraction}")
    if not 0.0 < max_cut_fraction <= 1.0 - reference_fraction:
        raise ValueError(
            f"max_cut_fraction must be in (0, 1 - reference_fraction], got {max_cut_fraction}: "
            f"the cut may not reach into the part used as the steady-state reference"
        )
    if tolerance_sigmas <= 0:
        raise ValueError(f"tolerance_sigmas must be positive, got {tolerance_sigmas}")


def detect_warmup(
    values: FloatArray,
    *,
    t: FloatArray | None = None,
    span: int | None = None,
    reference_fraction: float = 0.5,
    max_cut_fraction: float = 0.5,
    tolerance_sigmas: float = 4.0,
) -> WarmupDetection:
    """Find where one trial's series becomes stationary (the rule is in the module text).

    ``t`` (seconds) orders the series and gives ``cut_t_s``, the time of the first kept
    point; without it the series is taken in the order given. Series shorter than 10 points
    are kept whole, with a warning.
    """
    x = np.asarray(values, dtype=np.float64)
    times = None if t is None else np.asarray(t, dtype=np.float64)
    _validate_detect_warmup(x, times, span, reference_fraction, max_cut_fraction, tolerance_sigmas)
    n = len(x)
    order = np.arange(n) if times is None else np.argsort(times, kind="stable")
    chosen_span = _default_span(n) if span is None else span
    if n < 10:
        warn_degenerate(f"warm-up detection needs at least 10 points, got {n}; nothing cut")
        return WarmupDetection(
            0,
            None if times is None or n == 0 else float(times[order[0]]),
            np.ones(n, dtype=bool),
            True,
            float(np.mean(x)) if n else float("nan"),
            float("nan"),
            chosen_span,
        )
    series = x[order]
    smoothed = ema(series, span=chosen_span)
    reference_start = int(n * (1.0 - reference_fraction))
    level = float(np.mean(series[reference_start:]))
    # The EMA's noise around a straight line through the reference: a reference that still
    # drifts would otherwise pass its drift off as noise and widen the band to fit it.
    reference_x = np.arange(reference_start, n, dtype=np.float64)
    slope, intercept = np.polyfit(reference_x, smoothed[reference_start:], 1)
    noise = float(np.std(smoothed[reference_start:] - (slope * reference_x + intercept)))
    drift = abs(float(slope)) * (n - reference_start)
    a = 2.0 / (chosen_span + 1.0)
    r = 1.0 - a
    steps = np.arange(1, n + 1)
    factor = ((1.0 - r ** (2 * steps)) / (1.0 - r**2)) / ((1.0 - r**steps) / (1.0 - r)) ** 2
    factor_limit = a / (2.0 - a)
    # A constant tail has no noise; keep a hair of tolerance so rounding is not "warm-up".
    floor = 1e-9 * max(abs(level), 1.0)
    band = tolerance_sigmas * np.maximum(noise * np.sqrt(factor / factor_limit), floor)
    limit = int(n * max_cut_fraction)
    if drift > tolerance_sigmas * max(noise, floor):
        cut, stationary = limit, False
    else:
        outside = np.flatnonzero(np.abs(smoothed[:limit] - level) > band[:limit])
        cut = 0 if len(outside) == 0 else int(outside[-1]) + 1
        stationary = cut < limit
    keep_sorted = np.arange(n) >= cut
    keep = np.empty(n, dtype=bool)
    keep[order] = keep_sorted
    cut_t_s = None if times is None else float(times[order[min(cut, n - 1)]])
    return WarmupDetection(
        cut, cut_t_s, keep, stationary, level, float(tolerance_sigmas * noise), chosen_span
    )


def _validate_cut_warmup(sample: MetricSample) -> None:
    sample.require("t")


def cut_warmup(
    sample: MetricSample,
    *,
    span: int | None = None,
    reference_fraction: float = 0.5,
    max_cut_fraction: float = 0.5,
    tolerance_sigmas: float = 4.0,
) -> WarmupCut:
    """Cut each trial's and arm's warm-up (ServiceLab decides it per trial) and report it.

    Needs the ``t`` column; without a trial column each arm is one series.
    """
    _validate_cut_warmup(sample)
    times = sample.t
    assert times is not None  # checked by _validate_cut_warmup
    trial_codes = np.zeros(len(sample), dtype=np.int64) if sample.trial is None else sample.trial
    keep = np.ones(len(sample), dtype=bool)
    cuts: list[TrialCut] = []
    notes: list[str] = []
    for trial in np.unique(trial_codes):
        for arm in np.unique(sample.arm):
            rows = np.flatnonzero((trial_codes == trial) & (sample.arm == arm))
            found = detect_warmup(
                sample.value[rows],
                t=times[rows],
                span=span,
                reference_fraction=reference_fraction,
                max_cut_fraction=max_cut_fraction,
                tolerance_sigmas=tolerance_sigmas,
            )
            keep[rows] = found.keep
            label = None if sample.trial is None else int(trial)
            cuts.append(
                TrialCut(
                    label, int(arm), found.cut_index, len(rows), found.cut_t_s, found.stationary
                )
            )
            if not found.stationary:
                notes.append(
                    f"trial {label}, arm {'AB'[int(arm)] if arm in (0, 1) else arm}: the "
                    f"series did not settle within the first {max_cut_fraction:.0%}; "
                    f"lengthen the warm-up phase or the trial"
                )
    return WarmupCut(sample.select(keep), tuple(cuts), tuple(notes))
