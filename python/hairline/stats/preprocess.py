"""ServiceLab's preprocessing methods (servicelab-osdi24 section 4.2): none, square root,
outlier-elim and outlier-cap.

The square root evens out how much each request weighs in a mean when request costs are
heterogeneous; outlier-elim deletes the points above a percentile and outlier-cap
(winsorising) sets them to the percentile's value. The paper names "a certain percentile"
without a number; hairline's default is the 99th, which leaves 99% of requests untouched and
removes the worst tail seen under strenuous load.

The outlier methods act on per-request rows, the distribution of one arm's requests. A
metric with one row per trial, batch and arm (an aggregate: CPU per request, a p99,
throughput) has no request distribution: removing or capping "the top 1%" of such rows
removes or caps a whole batch of one arm, which is not an outlier among requests but half of
a comparison (measured: outlier-elim dropped B's row on the slower host and reversed the
sign of a true +2%). The outlier methods refuse such samples with a ``ValueError`` that
names the fix (:func:`is_aggregate` tells them apart).

Thresholds are computed from both arms pooled, per trial when the sample has a trial column.
Pooling matters for two reasons. Under the null hypothesis the arms are exchangeable, and a
threshold that is a symmetric function of the pooled data keeps them exchangeable, so the
tests that follow keep their false-positive rate. And a per-arm threshold would trim each arm
at its own tail, erasing exactly the slow requests a regression adds to B. Per trial, because
levels can move between trials and a global threshold would then trim one trial's rows only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from hairline.stats._modelkit import FloatArray
from hairline.stats.data import MetricSample

__all__ = [
    "DEFAULT_OUTLIER_PERCENTILE",
    "OUTLIER_METHODS",
    "PREPROCESSINGS",
    "Preprocessed",
    "Preprocessing",
    "is_aggregate",
    "outlier_cap",
    "outlier_elim",
    "outlier_thresholds",
    "preprocess",
    "sqrt_transform",
    "validate_test_arguments",
]

Preprocessing = Literal["none", "sqrt", "outlier-elim", "outlier-cap"]
PREPROCESSINGS: tuple[Preprocessing, ...] = ("none", "sqrt", "outlier-elim", "outlier-cap")
OUTLIER_METHODS: tuple[Preprocessing, ...] = ("outlier-elim", "outlier-cap")
DEFAULT_OUTLIER_PERCENTILE = 99.0
_CELL_COLUMNS = ("trial", "batch")


@dataclass(frozen=True)
class Preprocessed:
    """A preprocessed sample and what was done to it.

    ``power`` maps locations back to the metric's units (location**power): 2 after the square
    root, 1 otherwise. ``n_changed`` counts the rows removed (elim) or capped (cap).
    """

    sample: MetricSample
    method: Preprocessing
    power: float
    n_changed: int
    percentile: float | None


def validate_test_arguments(alpha: float, preprocessing: str) -> None:
    """What every model's test checks first: alpha in (0, 1), a known preprocessing."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if preprocessing not in PREPROCESSINGS:
        raise ValueError(
            f"unknown preprocessing {preprocessing!r}; choose one of {', '.join(PREPROCESSINGS)}"
        )


def _validate_percentile(percentile: float) -> None:
    if not 0.0 < percentile <= 100.0:
        raise ValueError(
            f"percentile must be in (0, 100], got {percentile!r}; "
            f"the paper's outlier methods use a high percentile such as 99"
        )


def sqrt_transform(values: FloatArray) -> FloatArray:
    """Square roots of non-negative values; a negative value is a ``ValueError``."""
    values = np.asarray(values, dtype=np.float64)
    negative = np.flatnonzero(values < 0)
    if len(negative):
        raise ValueError(
            f"the sqrt preprocessing needs non-negative values; {len(negative)} are negative "
            f"(first at row {int(negative[0])}: {float(values[negative[0]])!r}); "
            f"use preprocessing 'none' for metrics that can be negative"
        )
    return np.sqrt(values)


def is_aggregate(sample: MetricSample) -> bool:
    """Whether every (trial, batch, arm) cell holds at most one row: a metric aggregated
    per batch rather than observed per request. Columns the sample lacks are left out of the
    cell (with neither, each arm is one cell). Hosts are not part of the cell: in a batch an
    arm runs on one host, and samples with a host per row are still rows of requests."""
    if len(sample) == 0:
        return False
    keys = [np.asarray(sample.arm, dtype=np.int64)]
    keys += [getattr(sample, name) for name in _CELL_COLUMNS if getattr(sample, name) is not None]
    cells = np.unique(np.stack(keys, axis=1), axis=0)
    return bool(len(cells) == len(sample))


def _refuse_aggregates(sample: MetricSample, method: str) -> None:
    if is_aggregate(sample):
        cell = ", ".join(n for n in _CELL_COLUMNS if getattr(sample, n) is not None)
        raise ValueError(
            f"{method} applies to per-request rows of one arm; this metric has one row per "
            f"{cell + ' and ' if cell else ''}arm (an aggregate such as CPU per request or a "
            f"p99), where dropping or capping a row changes a whole batch of one arm: use the "
            f"'none' or 'sqrt' preprocessing instead (e.g. trimmed-t-none, paired-t-none)"
        )


def outlier_thresholds(
    sample: MetricSample, *, percentile: float = DEFAULT_OUTLIER_PERCENTILE
) -> FloatArray:
    """Per-row upper threshold: the ``percentile`` of both arms pooled, within each trial.

    Without a trial column every row gets the pooled percentile of the whole sample.
    """
    _validate_percentile(percentile)
    if len(sample) == 0:
        return np.empty(0)
    if sample.trial is None:
        return np.full(len(sample), np.percentile(sample.value, percentile))
    keys, inverse = np.unique(sample.trial, return_inverse=True)
    per_trial = np.array(
        [np.percentile(sample.value[inverse == k], percentile) for k in range(len(keys))]
    )
    thresholds: FloatArray = per_trial[inverse]
    return thresholds


def outlier_elim(
    sample: MetricSample, *, percentile: float = DEFAULT_OUTLIER_PERCENTILE
) -> Preprocessed:
    """Delete the rows above the pooled ``percentile`` (ServiceLab's outlier-elim).

    Refuses a batch-level aggregate (:func:`is_aggregate`) with a ``ValueError``.
    """
    _validate_percentile(percentile)
    _refuse_aggregates(sample, "outlier-elim")
    keep: NDArray[np.bool_] = sample.value <= outlier_thresholds(sample, percentile=percentile)
    return Preprocessed(
        sample=sample.select(keep),
        method="outlier-elim",
        power=1.0,
        n_changed=int(len(keep) - np.count_nonzero(keep)),
        percentile=percentile,
    )


def outlier_cap(
    sample: MetricSample, *, percentile: float = DEFAULT_OUTLIER_PERCENTILE
) -> Preprocessed:
    """Cap the rows above the pooled ``percentile`` at it (winsorising; outlier-cap).

    Refuses a batch-level aggregate (:func:`is_aggregate`) with a ``ValueError``.
    """
    _validate_percentile(percentile)
    _refuse_aggregates(sample, "outlier-cap")
    thresholds = outlier_thresholds(sample, percentile=percentile)
    above = sample.value > thresholds
    return Preprocessed(
        sample=replace(sample, value=np.minimum(sample.value, thresholds)),
        method="outlier-cap",
        power=1.0,
        n_changed=int(np.count_nonzero(above)),
        percentile=percentile,
    )


def preprocess(
    sample: MetricSample,
    method: Preprocessing,
    *,
    percentile: float = DEFAULT_OUTLIER_PERCENTILE,
) -> Preprocessed:
    """Apply one of ServiceLab's preprocessing methods by name."""
    if method == "none":
        return Preprocessed(sample, "none", 1.0, 0, None)
    if method == "sqrt":
        return Preprocessed(
            replace(sample, value=sqrt_transform(sample.value)), "sqrt", 2.0, 0, None
        )
    if method == "outlier-elim":
        return outlier_elim(sample, percentile=percentile)
    if method == "outlier-cap":
        return outlier_cap(sample, percentile=percentile)
    raise ValueError(f"unknown preprocessing {method!r}; choose one of {', '.join(PREPROCESSINGS)}")
