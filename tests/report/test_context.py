"""The report model: headlines, per-trial values after the warm-up cut, the JSON contract."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from report_fixture import make_report

from hairline.config import MetricPolicy, Threshold
from hairline.kit.jsonout import to_jsonable
from hairline.lab.analysis import AnalysisOptions, analyze
from hairline.report.context import (
    JSON_SCHEMA,
    ExperimentReport,
    analysis_json,
    experiment_json,
    headline,
    late_ticks_steal_explains,
    load_notes,
    metric_trials,
    suggested_in,
)
from hairline.report.context.notes import batch_text
from hairline.store.observations import Observations, read_observations, write_observations
from schema_check import check_schema

COLD_ROWS = 40  # requests served cold (three times slower) at the start of every trial


def lab_observations(
    path: Path, *, cpu_effect: float, seed: int, trials: int = 4, first_trial: int = 0
) -> Observations:
    """What the lab records: one CPU row per trial and arm, and per-request latency over t
    with a cold start, both arms serving the same requests (lockstep)."""
    rng = np.random.default_rng(seed)
    columns: dict[str, list[object]] = {
        k: [] for k in ("trial", "arm", "host", "request", "metric", "value", "t")
    }

    def add(trial: int, arm: str, metric: str, values: np.ndarray, t: np.ndarray) -> None:
        n = len(values)
        columns["trial"] += [trial] * n
        columns["arm"] += [arm] * n
        columns["host"] += [(trial + (arm == "B")) % 2] * n
        columns["request"] += list(range(n)) if n > 1 else [None]
        columns["metric"] += [metric] * n
        columns["value"] += values.tolist()
        columns["t"] += t.tolist()

    for trial in range(first_trial, first_trial + trials):
        requests = 100 * rng.lognormal(0, 0.3, size=200)
        cold = np.where(np.arange(200) < COLD_ROWS, 3.0, 1.0)
        for arm in ("A", "B"):
            scale = 1 + cpu_effect if arm == "B" else 1.0
            cpu = np.array([1000 * scale * (1 + rng.normal(0, 0.004))])
            add(trial, arm, "cpu_ns_per_request", cpu, np.zeros(1))
            latency = requests * cold * (1 + rng.normal(0, 0.02, size=200))
            add(trial, arm, "latency_us", latency, np.arange(200) * 0.01)
    return read_observations(write_observations(path, pa.table(columns)))


OPTIONS = AnalysisOptions(default_policy=MetricPolicy(Threshold(0.01, relative=True)))


def experiment(observations: Observations | None, **changes: object) -> ExperimentReport:
    analysis = None if observations is None else analyze(observations, OPTIONS)
    return make_report(**{"observations": observations, "analysis": analysis, **changes})


def test_a_five_percent_cpu_regression_makes_the_headline(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The effect against
    the data's 0.4% noise per value is tens of standard errors above the 1% threshold; nothing else
    is statistical."""
    report = experiment(lab_observations(tmp_path / "o.parquet", cpu_effect=0.05, seed=1))
    head = headline(report)
    assert head.status == "regression"
    assert head.text.startswith("regression found in cpu_ns_per_request +5.")


def test_headlines_for_every_phase() -> None:
    failed = experiment(None, phase="failed", failure="build of B failed\nerror[E0382]: moved")
    assert headline(failed).status == "failed"
    assert headline(failed).text == "failed: build of B failed"
    running = experiment(None, phase="running", trials_done=1)
    assert (headline(running).status, headline(running).text) == (
        "running",
        "running: 1 of 4 trials done",
    )
    cancelled = experiment(None, phase="cancelled", trials_done=2)
    assert headline(cancelled).text == "cancelled after 2 of 4 trials"


def test_an_aa_difference_is_called_a_false_alarm(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The effect against
    the data's 0.4% noise per value is tens of standard errors above the 1% threshold; nothing else
    is statistical."""
    observations = lab_observations(tmp_path / "o.parquet", cpu_effect=0.05, seed=1)
    head = headline(experiment(observations, kind="aa"))
    assert head.status == "regression"
    assert head.text.startswith("A/A check: false alarm in cpu_ns_per_request")


def test_per_trial_values_are_means_after_the_warm_up_cut(tmp_path: Path) -> None:
    observations = lab_observations(
        tmp_path / "o.parquet", cpu_effect=0.0, seed=2, trials=3, first_trial=10
    )
    report = experiment(observations)
    assert report.analysis is not None
    trials = {m.metric: m for m in metric_trials(observations, report.analysis)}

    latency = trials["latency_us"]
    assert latency.series
    assert [v.trial for v in latency.by_arm["A"]] == [10, 11, 12]
    latency_cut = next(r for r in report.analysis.results if r.metric == "latency_us")
    assert latency.rows_cut == latency_cut.warmup_rows_cut > 0
    for value in latency.by_arm["A"] + latency.by_arm["B"]:
        # The cold start is cut (the EMA lags it by a few points), and the rest is kept.
        assert COLD_ROWS <= value.rows_cut <= COLD_ROWS + 20
        assert value.rows + value.rows_cut == 200
        assert value.cut_t_s == pytest.approx(value.rows_cut * 0.01)

    table = observations.table.to_pylist()
    kept = [
        row["value"]
        for row in table
        if row["metric"] == "latency_us" and row["arm"] == "B" and row["trial"] == 11
    ][latency.by_arm["B"][1].rows_cut :]
    assert latency.by_arm["B"][1].value == pytest.approx(np.mean(kept))

    cpu = trials["cpu_ns_per_request"]
    assert not cpu.series and cpu.rows_cut == 0
    assert [v.rows for v in cpu.by_arm["B"]] == [1, 1, 1]


def test_a_series_the_analysis_left_whole_is_left_whole(tmp_path: Path) -> None:
    observations = lab_observations(tmp_path / "o.parquet", cpu_effect=0.0, seed=3)
    uncut = analyze(observations, dataclasses.replace(OPTIONS, cut_warmup=False))
    trials = {m.metric: m for m in metric_trials(observations, uncut)}
    assert trials["latency_us"].rows_cut == 0
    # Without an analysis yet, the series is cut as the default analysis would cut it.
    assert {m.metric: m for m in metric_trials(observations)}["latency_us"].rows_cut > 0


def test_the_json_contract_round_trips(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The effect against
    the data's 0.4% noise per value is tens of standard errors above the 1% threshold; nothing else
    is statistical."""
    observations = lab_observations(tmp_path / "o.parquet", cpu_effect=0.05, seed=4)
    report = experiment(observations, html_path=tmp_path / "report.html")
    payload = experiment_json(report)
    assert json.loads(json.dumps(payload, allow_nan=False)) == payload
    check_schema("experiment-report", payload)

    assert payload["schema"] == JSON_SCHEMA
    assert payload["experiment_id"] == 7 and payload["kind"] == "ab"
    assert payload["created_at"] == "2025-03-01T12:00:00+00:00"
    assert payload["html_path"] == str(tmp_path / "report.html")
    assert payload["headline"]["status"] == "regression" and payload["regression"] is True
    assert payload["arms"][0] == {
        "name": "A",
        "source": "git 1a2b3c4 (main)",
        "build_key": "k" * 64,
        "build_cached": True,
        "build_log": "/lab/a.log",
        "args": [],
        "env": {},
        "baseline": None,
    }
    assert payload["hosts"][1] == {
        "host": 1,
        "name": "",
        "address": None,
        "cpus": [2, 3],
        "facts": {"cpu_model": "Xeon", "kernel": "6.1"},
    }
    assert report.analysis is not None
    assert payload["analysis"] == to_jsonable(analysis_json(report.analysis))
    cpu = payload["per_trial"]["cpu_ns_per_request"]
    assert cpu["series"] is False
    assert [v["trial"] for v in cpu["arms"]["B"]] == [0, 1, 2, 3]
    assert all(1040 < v["value"] < 1060 for v in cpu["arms"]["B"])
    latency = payload["per_trial"]["latency_us"]["arms"]["A"][0]
    assert set(latency) == {"trial", "value", "rows", "rows_cut", "cut_t_s"}


def test_undefined_statistics_become_null(tmp_path: Path) -> None:
    constant = pa.table(
        {
            "trial": [0, 0, 1, 1],
            "arm": ["A", "B", "A", "B"],
            "metric": ["error_rate"] * 4,
            "value": [0.0] * 4,
        }
    )
    observations = read_observations(write_observations(tmp_path / "c.parquet", constant))
    payload = experiment_json(experiment(observations))
    [metric] = payload["analysis"]["metrics"]
    assert metric["effect_rel"] is None and metric["verdict"] == "no change"
    assert json.dumps(payload, allow_nan=False)
    check_schema("experiment-report", payload)


def test_a_failed_experiment_has_no_analysis_and_no_trials() -> None:
    payload = experiment_json(experiment(None, phase="failed", failure="no CPUs free"))
    assert payload["analysis"] is None and payload["per_trial"] == {}
    check_schema("experiment-report", payload)
    assert payload["failure"] == "no CPUs free" and payload["regression"] is False
    assert payload["headline"] == {"status": "failed", "text": "failed: no CPUs free"}


def test_failed_load_gates_become_one_note_per_gate() -> None:
    def summary(late: int, dropped: int = 0) -> dict[str, object]:
        return {
            "gates": [
                {"name": "rate", "passed": True, "value": 0.0, "detail": "rate ok"},
                {
                    "name": "late_sends",
                    "passed": late <= 24,
                    "value": late / 2400,
                    "detail": f"{late} of 2400 sends were more than 1 ms behind schedule",
                },
                {
                    "name": "dropped",
                    "passed": dropped == 0,
                    "value": float(dropped),
                    "detail": f"{dropped} requests dropped at --max-in-flight",
                },
            ]
        }

    notes = load_notes(
        {"t0b0": summary(10), "t0b1": summary(61), "t1b0": summary(30, dropped=3), "t1b1": {}}
    )
    assert notes == (
        "load gate dropped failed in 1 of 4 batches: requests were dropped at the in-flight "
        "limit (worst trial 2 batch 1: 3 requests dropped at --max-in-flight); the "
        "measurements are kept",
        "load gate late_sends failed in 2 of 4 batches: sends left the engine more than 1 ms "
        "after they fell due (worst trial 1 batch 2: 61 of 2400 sends were more than 1 ms behind "
        "schedule); the measurements are kept",
    )
    assert load_notes({"t0b0": summary(0)}) == ()


def late_batch(behind: int) -> dict[str, object]:
    """A 1.5 s batch at 300/s whose pacer woke late ``behind`` times."""
    gate = {"name": "late_sends", "passed": False, "value": behind / 450,
            "detail": f"{behind} of 450 late"}  # fmt: skip
    return {"gates": [gate], "behind": behind, "scheduled": 450, "duration_s": 1.5}


def test_late_sends_that_steal_covers_are_the_machines() -> None:
    """80 ms stolen from the engine's CPU at 300/s can delay 24 sends: 12 late ones are the
    hypervisor's doing (this VM's worst batch of 2026-11-28)."""
    [note] = load_notes({"t0b1": late_batch(12)}, engine_steal_ms={"t0b1": 80.0})
    assert "while the hypervisor ran other work on the engine's CPU (steal 80 ms" in note
    assert "the machine, not the generator" in note


def test_late_sends_beyond_what_steal_covers_are_the_generators() -> None:
    """10 ms stolen delays at most 3 of these sends: 12 late ones are the engine's."""
    notes = load_notes(
        {"t0b0": late_batch(2), "t0b1": late_batch(12)},
        engine_steal_ms={"t0b0": 10.0, "t0b1": 10.0},
    )
    assert (
        "the load generator fell behind its own schedule, more than the hypervisor's" in (notes[0])
    )
    assert late_ticks_steal_explains(late_batch(12), 10.0) == 3.0
    assert late_ticks_steal_explains({"duration_s": 0}, 10.0) == 0.0


def test_notes_are_part_of_the_json_contract() -> None:
    report = experiment(None, notes=("load gate late_sends failed in 1 of 2 batches",))
    assert experiment_json(report)["notes"] == ["load gate late_sends failed in 1 of 2 batches"]


def test_the_suggesters_functions_are_found_under_the_names_profilers_give_them() -> None:
    profile_names = [
        "hairline_engine::sample_stages::escape_strings::h0123456789abcdef",  # Rust, hashed
        "github.com/shop/store.(*Index).Lookup.func1",  # Go: import path, closure
        "app.search.split_words",
        "app.search.tokenize",  # the same function's old name, in the baseline
        "app.research.lookup",  # ends with "search.lookup" but not at a separator
        "other::escape_strings_fast",
    ]
    found = suggested_in(
        profile_names,
        ["sample_stages::escape_strings", "store.(*Index).Lookup", "search.lookup",
         "app.search.split_words", "app.search.tokenize"],
    )  # fmt: skip
    assert found == set(profile_names[:4])
    assert suggested_in(profile_names, []) == frozenset()


def test_a_batchs_run_name_reads_as_users_count() -> None:
    # The runner's names: trial and batch indexes from 0, attempts from 1 (lab/runner.py).
    assert batch_text("t0b1") == "trial 1 batch 2"
    assert batch_text("t6b0a2") == "trial 7 batch 1 attempt 2"
    assert batch_text("warm-up") == "warm-up"
