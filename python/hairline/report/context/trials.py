"""Per metric, arm and trial, the mean of the rows the analysis kept.

For a time series (per-request rows with a varying ``t``) the warm-up is cut as the
analysis cuts it (:func:`hairline.stats.cut_warmup`, per trial and arm), so the per-trial
values are the ones the verdict stands on.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from hairline.lab.analysis import Analysis
from hairline.stats import DegenerateDataWarning, MetricSample, cut_warmup
from hairline.store.observations import Observations

__all__ = ["MetricTrials", "TrialValue", "metric_trials"]

# Fewer time-ordered rows than this per trial and arm is not a series (as in lab.analysis).
_MIN_SERIES_ROWS = 20

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class TrialValue:
    """One arm's value of one metric in one trial."""

    trial: int | str | None  # the trial as the observations name it (None: no trial column)
    value: float  # mean of the rows kept
    rows: int  # rows kept
    rows_cut: int  # warm-up rows cut before the mean
    cut_t_s: float | None  # time of the first kept row, for a time series


@dataclass(frozen=True)
class MetricTrials:
    """Per-trial values of one metric, for every arm that measured it."""

    metric: str
    series: bool  # a time series, in which warm-up is looked for
    by_arm: Mapping[str, tuple[TrialValue, ...]]  # in the observations' arm order

    @property
    def rows_cut(self) -> int:
        return sum(v.rows_cut for values in self.by_arm.values() for v in values)


def _labels(column: pa.ChunkedArray | None, n: int) -> tuple[IntArray, list[Any]]:
    """Integer codes and the label of each code, labels sorted (None last)."""
    if column is None:
        return np.zeros(n, dtype=np.int64), [None]
    encoded = pc.dictionary_encode(column).combine_chunks()
    raw = np.asarray(
        pc.fill_null(pc.cast(encoded.indices, pa.int64()), -1).to_numpy(zero_copy_only=False),
        dtype=np.int64,
    )
    labels: list[Any] = encoded.dictionary.to_pylist()
    if (raw < 0).any():
        raw = np.where(raw < 0, len(labels), raw)
        labels.append(None)
    # One column has one type, so labels compare; the single None (if any) goes last.
    order = sorted(
        range(len(labels)),
        key=lambda i: (labels[i] is None, labels[i] if labels[i] is not None else 0),
    )
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels))
    return rank[raw], [labels[i] for i in order]


def _is_series(t: FloatArray | None, codes: IntArray) -> bool:
    """Whether every trial has a time series long enough to look for warm-up in."""
    if t is None or len(t) == 0 or np.all(t == t[0]):
        return False
    return bool(np.unique(codes, return_counts=True)[1].min() >= _MIN_SERIES_ROWS)


def metric_trials(
    observations: Observations, analysis: Analysis | None = None
) -> tuple[MetricTrials, ...]:
    """Per-trial means of every metric and arm, after the warm-up cut the analysis made.

    A series is cut when the analysis cut rows from it, or when there is no analysis yet (as
    the default analysis would); a series the analysis left whole is left whole here too.
    """
    cut_by_analysis: dict[str, bool] = {}
    if analysis is not None:
        for r in analysis.results:
            cut_by_analysis[r.metric] = cut_by_analysis.get(r.metric, False) or bool(
                r.warmup_rows_cut
            )
    table = observations.table
    out: list[MetricTrials] = []
    for metric in observations.metrics:
        rows = table.filter(pc.equal(table.column("metric"), metric))
        arms = rows.column("arm").to_numpy(zero_copy_only=False)
        values = rows.column("value").to_numpy(zero_copy_only=False).astype(np.float64)
        t = (
            rows.column("t").to_numpy(zero_copy_only=False).astype(np.float64)
            if "t" in rows.column_names
            else None
        )
        codes, labels = _labels(
            rows.column("trial") if "trial" in rows.column_names else None, len(values)
        )
        by_arm: dict[str, tuple[TrialValue, ...]] = {}
        series_seen = False
        for arm in observations.arms:
            mask = arms == arm
            if not mask.any():
                continue
            arm_t = None if t is None else t[mask]
            series = _is_series(arm_t, codes[mask])
            series_seen = series_seen or series
            cut = series and cut_by_analysis.get(metric, analysis is None)
            by_arm[arm] = _arm_trials(values[mask], codes[mask], arm_t, labels, cut=cut)
        out.append(MetricTrials(metric=metric, series=series_seen, by_arm=by_arm))
    return tuple(out)


def _arm_trials(
    values: FloatArray, codes: IntArray, t: FloatArray | None, labels: list[Any], *, cut: bool
) -> tuple[TrialValue, ...]:
    cut_rows: dict[int, int] = {}
    cut_at: dict[int, float | None] = {}
    if cut and t is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DegenerateDataWarning)
            found = cut_warmup(
                MetricSample.from_arrays(values, np.zeros(len(values)), trial=codes, t=t)
            )
        assert found.sample.trial is not None  # a trial column went in
        values, codes = found.sample.value, found.sample.trial
        for trial_cut in found.cuts:
            code = int(trial_cut.trial or 0)
            cut_rows[code], cut_at[code] = trial_cut.n_cut, trial_cut.cut_t_s
    trials: list[TrialValue] = []
    for code in np.unique(codes):
        kept = values[codes == code]
        trials.append(
            TrialValue(
                trial=labels[int(code)],
                value=float(np.mean(kept)),
                rows=len(kept),
                rows_cut=cut_rows.get(int(code), 0),
                cut_t_s=cut_at.get(int(code)),
            )
        )
    return tuple(trials)
