"""lab.analysis: A/A history runs, a look of a sequential design at its level, and
three-sided experiments (each arm against the arm it names)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from experiment_files import write_experiment

from hairline.arms.isolation import dropped_write_rows
from hairline.config import Threshold, load_experiment
from hairline.errors import ConfigError, DataError
from hairline.lab.analysis import AnalysisOptions, analyze, history_runs
from hairline.lab.schedule import schedule
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


def three_arms(trials: int, *, parent: float, change: float, seed: int) -> pa.Table:
    """Three arms on three hosts 3% apart, every arm on every host once per trial (the lab's
    fully balanced schedule): production, the parent (``parent`` slower than production)
    and the change (``change`` slower than its parent). Each trial has its own level."""
    rng = np.random.default_rng(seed)
    cost = {"production": 1.0, "parent": 1 + parent, "change": (1 + parent) * (1 + change)}
    host_effect = (1.0, 1.03, 0.97)
    level = 1000.0 * (1 + rng.normal(0, 0.03, size=trials))
    rows: dict[str, list[object]] = {
        k: [] for k in ("arm", "trial", "batch", "host", "metric", "value")
    }
    for b in schedule(tuple(cost), trials=trials, design="fully-balanced"):
        for host, arm in enumerate(b.arm_on_host):
            noise = 1 + rng.normal(0, 0.003)
            value = level[b.trial] * cost[arm] * host_effect[host] * noise
            for name, x in zip(
                rows, (arm, b.trial, b.batch, host, "cpu_ns_per_request", value), strict=True
            ):
                rows[name].append(x)
    return pa.table(rows)


def test_three_sided_compares_the_change_with_its_parent_and_the_parent_with_production() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. With 0.3% noise per
    value over 6 trials the effects' SE is near 0.1%: 0.004 is about 4 SE, and 2% and 3% are far
    above the 1% threshold."""
    observations = observations_from_table(
        three_arms(6, parent=0.02, change=0.03, seed=4), source="three"
    )
    result = analyze(
        observations, AnalysisOptions(), baseline="production", baselines={"change": "parent"}
    )
    by_pair = {(r.candidate, r.baseline): r for r in result.results}
    assert set(by_pair) == {("parent", "production"), ("change", "parent")}
    # Each against its own baseline: the change's 3%, not the 5% it is above production.
    assert by_pair[("change", "parent")].comparison.effect_rel == pytest.approx(0.03, abs=0.004)
    assert by_pair[("parent", "production")].comparison.effect_rel == pytest.approx(0.02, abs=0.004)
    assert result.chained and result.deciding == ("change",)
    assert [(r.candidate, r.verdict.label) for r in result.regressions] == [
        ("change", "regression")
    ]
    assert [r.candidate for r in result.context_regressions] == ["parent"]


def test_a_parent_regression_alone_does_not_decide_a_three_sided_experiment() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. A 3% parent effect
    against 0.3% noise is far above the 1% threshold, and the change's zero effect is about 10 SE
    below it."""
    observations = observations_from_table(
        three_arms(6, parent=0.03, change=0.0, seed=5), source="three"
    )
    result = analyze(
        observations, AnalysisOptions(), baseline="production", baselines={"change": "parent"}
    )
    assert result.regressions == ()
    assert [(r.candidate, r.baseline) for r in result.context_regressions] == [
        ("parent", "production")
    ]


def test_without_baselines_of_their_own_every_arm_decides_against_the_baseline() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. 3% against 0.3% noise
    over 4 trials is far above the 1% threshold."""
    observations = observations_from_table(
        three_arms(4, parent=0.03, change=0.0, seed=6), source="three"
    )
    result = analyze(observations, AnalysisOptions(), baseline="production")
    assert not result.chained
    assert result.deciding == ("parent", "change")
    assert {(r.candidate, r.baseline) for r in result.results} == {
        ("parent", "production"),
        ("change", "production"),
    }
    # Both are 3% above production, and both decide.
    assert {r.candidate for r in result.regressions} == {"parent", "change"}


def test_a_comparison_with_an_arm_that_is_not_there_is_an_error_naming_it() -> None:
    observations = observations_from_table(
        three_arms(2, parent=0.0, change=0.0, seed=7), source="three.parquet"
    )
    with pytest.raises(DataError, match=r"three.parquet: .*change against parnet.*'parnet'"):
        analyze(observations, AnalysisOptions(), baseline="production",
                baselines={"change": "parnet"})  # fmt: skip


def dropped_write_batches(trials: int, *, seed: int) -> pa.Table:
    """Each batch's dropped writes as the runner stores them (arms/isolation's rows from the
    egress proxies' reports): /orders about 100 a batch in A and 130 in B, /audit alike,
    /payments written by B alone (about 3 a batch; A's rows are 0)."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[object]] = {k: [] for k in ("arm", "trial", "batch", "metric", "value")}
    for trial in range(trials):
        for batch in (0, 1):
            dropped = {
                "A": {"POST /orders": rng.poisson(100), "POST /audit": rng.poisson(50)},
                "B": {"POST /orders": rng.poisson(130), "POST /audit": rng.poisson(50),
                      "POST /payments": rng.poisson(3)},
            }  # fmt: skip
            reports = {
                arm: {"downstreams": {"127.0.0.1:9000": {"dropped": counts}}}
                for arm, counts in dropped.items()
            }
            for arm, metric, value in dropped_write_rows(reports):
                for column, item in zip(rows, (arm, trial, batch, metric, value), strict=True):
                    rows[column].append(item)
    return pa.table(rows)


def test_dropped_writes_per_endpoint_are_metrics_judged_by_their_familys_threshold(
    tmp_path: Path,
) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. B's +30 writes
    a batch on /orders over 10 trials (Poisson sd 10 a batch, so about 3.5 per trial's
    difference) is about 8 SE from 0; /payments' 3 a batch against A's 0 about 6 SE."""
    observations = observations_from_table(dropped_write_batches(10, seed=7), source="drops")
    orders = "dropped_writes[127.0.0.1:9000 POST /orders]"
    payments = "dropped_writes[127.0.0.1:9000 POST /payments]"
    audit = "dropped_writes[127.0.0.1:9000 POST /audit]"
    assert set(observations.metrics) == {orders, payments, audit}
    # The built-in family policy (from an experiment file that names none): one write more
    # per batch than the baseline matters, whatever the endpoint.
    config = load_experiment(write_experiment(tmp_path, tag="drops").path)
    policies = config.policies()
    assert policies["dropped_writes"].threshold == Threshold(1.0, relative=False)
    verdicts = {
        r.metric: r.verdict.label
        for r in analyze(observations, AnalysisOptions(policies=policies)).results
    }
    # A write only the candidate makes, and 30% more writes to /orders, are regressions.
    assert verdicts[payments] == "regression" and verdicts[orders] == "regression"
    assert verdicts[audit] != "regression"
    # A threshold named for the family in the service file holds for each endpoint; one
    # named for an endpoint wins over it.
    tolerant = load_experiment(
        write_experiment(
            tmp_path / "tolerant", tag="drops", thresholds={
                "dropped_writes": "60", f'"{payments}"': "0.5",
            },
        ).path
    ).policies()  # fmt: skip
    verdicts = {
        r.metric: r.verdict.label
        for r in analyze(observations, AnalysisOptions(policies=tolerant)).results
    }
    assert verdicts[orders] != "regression" and verdicts[payments] == "regression"
    assert tolerant[payments].threshold == Threshold(0.5, relative=False)
