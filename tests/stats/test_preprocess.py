"""Preprocessing: thresholds from both arms pooled, per trial; sqrt refuses negatives."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.stats.data import MetricSample
from hairline.stats.models import run_model
from hairline.stats.preprocess import (
    Preprocessing,
    is_aggregate,
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


def swapped_batches(trials: int, *, effect_rel: float, slow_host: float) -> MetricSample:
    """CPU per request as the lab stores it: one row per trial, batch, host and arm; in
    batch 0 A runs on host 0 and B on host 1, in batch 1 they swap; host 1 is slower."""
    value, arm, trial, batch, host = [], [], [], [], []
    for t in range(trials):
        for b in (0, 1):
            for a in (0, 1):
                h = (a + b) % 2
                value.append(100.0 * (1 + effect_rel * a) * (slow_host if h else 1.0))
                arm.append(a)
                trial.append(t)
                batch.append(b)
                host.append(h)
    return MetricSample.from_arrays(value, arm, trial=trial, batch=batch, host=host)


def test_batch_level_aggregates_are_told_apart_from_request_rows() -> None:
    assert is_aggregate(swapped_batches(3, effect_rel=0.02, slow_host=1.1))
    per_request = MetricSample.from_arrays(
        np.arange(8.0), [0, 0, 1, 1] * 2, trial=[0, 0, 0, 0, 1, 1, 1, 1]
    )
    assert not is_aggregate(per_request)
    # Without structure columns each arm is one cell: one value per arm is an aggregate.
    assert is_aggregate(two_arms([1.0], [2.0]))
    assert not is_aggregate(two_arms([1.0, 2.0], [3.0]))


@pytest.mark.parametrize("method", ["outlier-elim", "outlier-cap"])
def test_outlier_methods_refuse_batch_level_aggregates(method: Preprocessing) -> None:
    # Pooled per trial, the 99th percentile of four batch rows sits just below B's row on
    # the slower host: outlier-elim dropped it and turned a true +2% into -2.9%.
    sample = swapped_batches(8, effect_rel=0.02, slow_host=1.1)
    with pytest.raises(ValueError, match=r"per-request rows.*trial, batch and arm.*'none'"):
        preprocess(sample, method)
    with pytest.raises(ValueError, match="per-request rows"):
        run_model(f"permutation-{method}", sample, rng=np.random.default_rng(0))
    # The preprocessing-free model sees the +2% the design was built to show.
    plain = run_model("permutation-none", sample, rng=np.random.default_rng(0))
    assert plain.effect_rel == pytest.approx(0.02)
