"""`hairline analyze`: verdicts, JSON contract and exit codes on seeded data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
from click.testing import CliRunner

from hairline.cli import main
from hairline.store.observations import read_observations, write_observations
from schema_check import check_schema


def lockstep_experiment(path: Path, *, cpu_effect: float, seed: int, trials: int = 8) -> Path:
    """Trials in which both arms serve the same requests, as the lab's lockstep replay does."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[object]] = {
        k: [] for k in ("arm", "trial", "host", "request", "metric", "value", "t")
    }
    for trial in range(trials):
        cost = rng.lognormal(0, 0.5, size=200) * 100  # the trial's requests
        for arm, host in (("A", trial % 2), ("B", 1 - trial % 2)):
            scale = 1 + cpu_effect if arm == "B" else 1.0
            cpu = cost * scale * (1 + rng.normal(0, 0.01, size=cost.size))
            mem = 500 + rng.normal(0, 2, size=cost.size)
            for metric, values in (("cpu_ns", cpu), ("mem", mem)):
                n = values.size
                columns["arm"] += [arm] * n
                columns["trial"] += [trial] * n
                columns["host"] += [host] * n
                columns["request"] += list(range(n))
                columns["metric"] += [metric] * n
                columns["value"] += values.tolist()
                columns["t"] += (np.arange(n) * 0.05).tolist()
    return write_observations(path, pa.table(columns))


def test_a_three_percent_regression_is_flagged_with_exit_1(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The realised effect
    is about 2.9% (the comment) with 1% noise on 200 requests a trial: the interval is far inside 2%
    to 4%; mem has no effect and 0.4% noise against the 1% default threshold."""
    obs = lockstep_experiment(tmp_path / "ab.parquet", cpu_effect=0.03, seed=1)
    out = tmp_path / "verdict.json"
    result = CliRunner().invoke(
        main, ["analyze", str(obs), "--threshold", "cpu_ns=1%", "--json", str(out)]
    )
    assert result.exit_code == 1, result.output
    verdicts = {m["metric"]: m for m in _analysis(out)["metrics"]}
    cpu = verdicts["cpu_ns"]
    assert cpu["verdict"] == "regression"
    # Each request's own 1% noise moves this experiment's realised effect to about 2.9%;
    # the interval is about that, not necessarily the nominal 3%.
    assert 0.02 < cpu["ci_rel"][0] <= cpu["effect_rel"] <= cpu["ci_rel"][1] < 0.04
    assert cpu["p_value"] < 0.05 and cpu["model"] == "trimmed-t-none"
    assert verdicts["mem"]["verdict"] in ("no change", "inconclusive")
    assert "regression" in result.output


def test_an_aa_comparison_is_not_a_regression(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. No effect: reaching
    the 1% default threshold would take many standard errors of 1% (cpu) and 0.4% (mem) noise per
    request over 8 trials."""
    obs = lockstep_experiment(tmp_path / "aa.parquet", cpu_effect=0.0, seed=2)
    out = tmp_path / "verdict.json"
    result = CliRunner().invoke(main, ["analyze", str(obs), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert not _analysis(out)["regression"]


def aa_history(path: Path, *, runs: int, trials: int, seed: int) -> Path:
    """``runs`` A/A experiments of ``trials`` trials each, told apart by an experiment
    column, as the lab's history is."""
    tables = []
    for run in range(runs):
        one = lockstep_experiment(path, cpu_effect=0.0, seed=seed + run, trials=trials)
        table = read_observations(one).table
        tables.append(table.append_column("experiment", pa.array([run] * len(table))))
    return write_observations(path, pa.concat_tables(tables))


def test_history_drives_adaptive_selection(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. A 3% regression
    against 1% noise per request over 8 trials is far above the 1% threshold."""
    history = aa_history(tmp_path / "history.parquet", runs=10, trials=8, seed=30)
    obs = lockstep_experiment(tmp_path / "ab.parquet", cpu_effect=0.03, seed=4)
    out = tmp_path / "verdict.json"
    result = CliRunner().invoke(
        main, ["analyze", str(obs), "--history", str(history), "--json", str(out)]
    )
    assert result.exit_code == 1, result.output
    cpu = next(m for m in _analysis(out)["metrics"] if m["metric"] == "cpu_ns")
    assert cpu["model_reason"].startswith("adaptive: best of 10 A/A runs")


def test_a_history_without_experiments_is_an_error_naming_the_column(tmp_path: Path) -> None:
    # Split by trial, ten trials of one A/A experiment became ten "runs": the ci-test then
    # sized its interval for one trial, against an experiment of eight.
    history = lockstep_experiment(tmp_path / "history.parquet", cpu_effect=0.0, seed=3, trials=10)
    obs = lockstep_experiment(tmp_path / "ab.parquet", cpu_effect=0.03, seed=4)
    for model in ("ci-test", "adaptive"):
        result = CliRunner().invoke(
            main, ["analyze", str(obs), "--history", str(history), "--model", model]
        )
        assert result.exit_code == 2, result.output
        assert "no 'experiment' column" in result.output
        assert "add a column 'experiment'" in result.output


def test_a_named_bootstrap_and_a_lower_is_worse_direction(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. A 5% change against
    1% noise per request is far past the 1% threshold."""
    obs = lockstep_experiment(tmp_path / "ab.parquet", cpu_effect=-0.05, seed=5)
    out = tmp_path / "verdict.json"
    result = CliRunner().invoke(
        main,
        ["analyze", str(obs), "--bootstrap", "iid", "--direction", "cpu_ns=lower-is-worse",
         "--json", str(out)],
    )  # fmt: skip
    cpu = next(m for m in _analysis(out)["metrics"] if m["metric"] == "cpu_ns")
    assert cpu["model"] == "bootstrap-iid"
    assert cpu["direction"] == "lower-is-worse"
    assert cpu["verdict"] == "regression" and result.exit_code == 1


def test_bad_inputs_exit_2_with_the_column_or_option_named(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = tmp_path / "bad.csv"
    bad.write_text("arm,metric,value\nA,cpu,1\nB,cpu,x\n")
    result = runner.invoke(main, ["analyze", str(bad)])
    assert result.exit_code == 2 and "not numeric at row 2 (line 3)" in result.output
    one_arm = tmp_path / "one.csv"
    one_arm.write_text("arm,metric,value\nA,cpu,1\nA,cpu,2\n")
    result = runner.invoke(main, ["analyze", str(one_arm)])
    assert result.exit_code == 2 and "single arm" in result.output
    obs = lockstep_experiment(tmp_path / "ab.parquet", cpu_effect=0.0, seed=6, trials=2)
    result = runner.invoke(main, ["analyze", str(obs), "--threshold", "latency=1%"])
    assert result.exit_code == 2 and "not in" in result.output and "cpu_ns" in result.output
    result = runner.invoke(main, ["analyze", str(obs), "--model", "magic"])
    assert result.exit_code == 2 and "is not a model" in result.output


def _analysis(out: Path) -> dict[str, Any]:
    """``analyze --json``'s document, checked against docs/schema/analysis.json."""
    document: dict[str, Any] = json.loads(out.read_text())
    check_schema("analysis", document)
    return document
