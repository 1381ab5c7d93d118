"""Preprocessing: thresholds from both arms pooled, per trial; sqrt refuses negatives."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.data import MetricSample
from hairline.stats.preprocess import (
    outlier_cap,
    outlier_elim,
    outlier_thresholds,
    preprocess,
    sqrt_transform,
)


def two_arms(a: list[float], b: list[float], **columns: object) -> MetricSample:
    return MetricSample.from_arrays(a + b, [0] * len(a) + [1] * len(b), **columns)  # type: ignore[arg-type]


def test_sqrt_names_the_first_negative_row() -> None:
    with pytest.raises(ValueError, match=r"row 2: -1\.0"):
        sqrt_transform(np.array([4.0, 9.0, -1.0]))
    assert sqrt_transform(np.array([4.0, 9.0])).tolist() == [2.0, 3.0]


def test_outlier_threshold_is_shared_by_both_arms() -> None:
    # B carries the tail; a per-arm threshold would cap B at its own tail and hide it.
    sample = two_arms([1.0] * 50, [1.0] * 45 + [100.0] * 5)
    thresholds = outlier_thresholds(sample, percentile=90.0)
    assert np.all(thresholds == thresholds[0])
    assert thresholds[0] == pytest.approx(np.percentile(sample.value, 90.0))


def test_thresholds_are_computed_per_trial() -> None:
    low = [1.0, 2.0, 3.0, 4.0]
    high = [100.0, 200.0, 300.0, 400.0]
    sample = MetricSample.from_arrays(low + high, [0, 0, 1, 1] * 2, trial=[0, 0, 0, 0, 1, 1, 1, 1])
    thresholds = outlier_thresholds(sample, percentile=50.0)
    assert thresholds.tolist() == [2.5] * 4 + [250.0] * 4


def test_outlier_cap_winsorises_at_the_percentile() -> None:
    values = [float(v) for v in range(1, 101)]
    sample = two_arms(values[:50], values[50:])
    capped = outlier_cap(sample, percentile=95.0)
    limit = np.percentile(values, 95.0)
    assert capped.sample.value.max() == pytest.approx(limit)
    assert capped.n_changed == 5
    assert len(capped.sample) == 100


def test_outlier_elim_deletes_the_rows_above() -> None:
    values = [float(v) for v in range(1, 101)]
    sample = two_arms(values[:50], values[50:])
    trimmed = outlier_elim(sample, percentile=95.0)
    assert len(trimmed.sample) == 95
    assert trimmed.n_changed == 5
    assert trimmed.sample.value.max() <= np.percentile(values, 95.0)


def test_percentile_100_changes_nothing() -> None:
    sample = two_arms([1.0, 2.0, 3.0], [4.0, 5.0, 60.0])
    assert outlier_cap(sample, percentile=100.0).n_changed == 0
    assert len(outlier_elim(sample, percentile=100.0).sample) == 6


@pytest.mark.parametrize("percentile", [0.0, -5.0, 101.0])
def test_bad_percentile_is_rejected(percentile: float) -> None:
    with pytest.raises(ValueError, match="percentile"):
        outlier_cap(two_arms([1.0], [2.0]), percentile=percentile)


def test_preprocess_dispatches_by_name_and_reports_the_power() -> None:
    sample = two_arms([1.0, 4.0], [9.0, 16.0])
    assert preprocess(sample, "none").sample is sample
    rooted = preprocess(sample, "sqrt")
    assert rooted.power == 2.0
    assert rooted.sample.value.tolist() == [1.0, 2.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="outlier-cap"):
        preprocess(sample, "log")  # type: ignore[arg-type]
