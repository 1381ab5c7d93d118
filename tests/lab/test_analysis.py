"""lab.analysis: A/A history runs, and a look of a sequential design at its level."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hairline.errors import ConfigError, DataError
from hairline.lab.analysis import AnalysisOptions, analyze, history_runs
from hairline.stats.sequential import FIRST_LOOK, look_alpha
from hairline.store.observations import observations_from_table


def batches(trials: int, *, seed: int, experiment: int | None = None) -> pa.Table:
    """CPU per request as the lab stores it: one row per trial, batch and arm."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[object]] = {k: [] for k in ("arm", "trial", "batch", "metric", "value")}
    for trial in range(trials):
        level = 1000.0 * (1 + rng.normal(0, 0.03))
        for batch in (0, 1):
            for arm in ("A", "B"):
                rows["arm"].append(arm)
                rows["trial"].append(trial)
                rows["batch"].append(batch)
                rows["metric"].append("cpu_ns_per_request")
                rows["value"].append(level * (1 + rng.normal(0, 0.01)))
    table = pa.table(rows)
    if experiment is not None:
        table = table.append_column("experiment", pa.array([experiment] * len(table)))
    return table


def test_history_runs_are_its_experiments() -> None:
    history = observations_from_table(
        pa.concat_tables([batches(4, seed=s, experiment=s) for s in range(3)]), source="aa"
    )
    runs = history_runs(history, "cpu_ns_per_request")
    assert len(runs) == 3
    assert all(run.trial is not None and len(np.unique(run.trial)) == 4 for run in runs)


def test_history_without_an_experiment_column_is_an_error_naming_it() -> None:
    history = observations_from_table(batches(10, seed=1), source="aa.parquet")
    with pytest.raises(DataError, match=r"aa.parquet: .*no 'experiment' column") as found:
        history_runs(history, "cpu_ns_per_request")
    assert "add a column 'experiment'" in str(found.value)


def test_a_look_tests_each_metric_at_the_level_of_the_models_it_uses() -> None:
    observations = observations_from_table(batches(6, seed=2), source="look")
    look = (FIRST_LOOK, 15)
    fallback = analyze(observations, AnalysisOptions(sequential=look)).results[0]
    assert fallback.model == "trimmed-t-none"
    assert fallback.comparison.alpha == look_alpha(0.05, FIRST_LOOK, 15)
    named = analyze(observations, AnalysisOptions(model="permutation-none", sequential=look))
    # No per-trial form to calibrate: Bonferroni over the 13 looks.
    assert named.results[0].comparison.alpha == pytest.approx(0.05 / 13)
    plain = analyze(observations, AnalysisOptions()).results[0]
    assert plain.comparison.alpha == 0.05
    with pytest.raises(ConfigError, match="at least 2 trials"):
        analyze(observations, AnalysisOptions(sequential=(1, 15)))


def test_an_outlier_model_on_a_batch_level_metric_names_a_model_that_applies() -> None:
    observations = observations_from_table(batches(6, seed=3), source="ab")
    with pytest.raises(DataError, match=r"per-request rows.*'none' or 'sqrt'"):
        analyze(observations, AnalysisOptions(model="trimmed-t-outlier-elim"))
