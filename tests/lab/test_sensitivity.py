"""The sensitivity of an experiment file from its A/A trials (lab/sensitivity.py), on
seeded A/A observations whose per-trial noise is known."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from hairline.errors import DataError
from hairline.lab.sensitivity import noise_by_host, sensitivity_from_aa
from hairline.stats.planning import detectable_effect, power_at
from hairline.store.observations import Observations, observations_from_table


def aa_observations(trial_effects: list[float], *, metric: str = "cpu") -> Observations:
    """One row per arm and trial: arm A at 1000, arm B at 1000 x (1 + effect)."""
    rows = {"trial": [], "arm": [], "metric": [], "value": []}  # type: dict[str, list[object]]
    for trial, effect in enumerate(trial_effects):
        for arm, value in (("A", 1000.0), ("B", 1000.0 * (1 + effect))):
            rows["trial"].append(trial)
            rows["arm"].append(arm)
            rows["metric"].append(metric)
            rows["value"].append(value)
    return observations_from_table(pa.table(rows), source="seeded A/A")


def test_the_noise_is_the_spread_of_the_trials_effects_and_the_mde_shrinks_with_trials() -> None:
    effects = [0.01, -0.01, 0.005, -0.005, 0.0, 0.002, -0.002, 0.0]
    report = sensitivity_from_aa(aa_observations(effects), trial_s=6.0, trials_grid=(2, 4, 16))
    (cpu,) = report.metrics
    assert cpu.sd_per_trial == pytest.approx(float(np.std(effects, ddof=1)), rel=1e-9)
    mde = dict(cpu.mde_by_trials)
    assert mde[2] > mde[4] > mde[16]
    assert mde[16] == pytest.approx(detectable_effect(cpu.sd_per_trial, 16))
    # At its MDE, a t test on 16 trials with that noise has exactly the asked power.
    assert power_at(cpu.sd_per_trial, 16, mde[16]) == pytest.approx(0.8, abs=1e-6)
    assert report.minutes(16) == pytest.approx(1.6)
    assert report.to_json()["metrics"][0]["mde_rel"][0] == {  # type: ignore[index]
        "trials": 2,
        "minutes": pytest.approx(0.2),
        "mde_rel": mde[2],
        "on_pairs": [{"host_pairs": 1, "rounds": 2, "minutes": pytest.approx(0.2)}],
    }


def test_on_host_pairs_the_same_trials_take_ceil_of_trials_over_pairs_trial_times() -> None:
    effects = [0.01, -0.01, 0.005, -0.005, 0.0, 0.002]
    report = sensitivity_from_aa(
        aa_observations(effects), trial_s=30.0, trials_grid=(3, 8), host_pairs=(1, 2, 4)
    )
    assert [report.minutes(8, p) for p in (1, 2, 4)] == [4.0, 2.0, 1.0]
    assert report.minutes(3, 2) == 1.0  # two rounds: one pair runs a second trial
    entry = report.to_json()["metrics"][0]["mde_rel"][1]
    assert entry["on_pairs"] == [
        {"host_pairs": 1, "rounds": 8, "minutes": 4.0},
        {"host_pairs": 2, "rounds": 4, "minutes": 2.0},
        {"host_pairs": 4, "rounds": 2, "minutes": 1.0},
    ]
    # The MDE is that of the trials, whatever the pairs.
    assert entry["mde_rel"] == dict(report.metrics[0].mde_by_trials)[8]


def test_a_metric_that_never_moves_or_has_too_few_trials_is_skipped_with_a_reason() -> None:
    constant = sensitivity_from_aa(aa_observations([0.0] * 5), trial_s=1.0)
    assert constant.metrics == () and "do not vary" in constant.skipped[0][1]
    short = sensitivity_from_aa(aa_observations([0.01, -0.01]), trial_s=1.0)
    assert short.metrics == () and "3 are needed" in short.skipped[0][1]


def test_observations_without_trials_are_refused_with_a_hint() -> None:
    table = pa.table({"arm": ["A", "B"], "metric": ["cpu"] * 2, "value": [1.0, 1.0]})
    with pytest.raises(DataError, match="'trial' column"):
        sensitivity_from_aa(observations_from_table(table, source="x"), trial_s=1.0)


def test_the_t_tests_mde_needs_at_least_two_trials() -> None:
    assert math.isinf(detectable_effect(0.01, 1))
    assert detectable_effect(0.01, 1, test="z") == pytest.approx(0.028016, rel=1e-4)


def test_the_noise_is_split_by_host_with_the_offset_and_the_drift_both_share() -> None:
    """Seeded: 200 trials of two batches, host 0 at -3% varying 1%, host 1 at +3% varying 2%,
    both moved by a common 1% drift per batch: each estimate is within a few of its
    standard errors (about 0.1 points for the offsets and SDs, 0.05 for r)."""
    rng = np.random.default_rng(7)
    rows: dict[str, list[object]] = {
        k: [] for k in ("trial", "batch", "arm", "host", "metric", "value")
    }
    for trial in range(200):
        for batch in range(2):
            common = rng.normal(0.0, 0.01)
            for host, (offset, sd) in enumerate(((-0.03, 0.01), (0.03, 0.02))):
                arm = "AB"[(host + batch) % 2]  # swapped between the trial's batches
                value = 1000.0 * (1 + offset + common + rng.normal(0.0, sd))
                for key, cell in zip(rows, (trial, batch, arm, host, "cpu", value), strict=True):
                    rows[key].append(cell)
    split = noise_by_host(observations_from_table(pa.table(rows), source="seeded"), "cpu")
    assert split is not None and split.batches == 400
    low, high = split.hosts
    assert low.offset_rel == pytest.approx(-0.03, abs=0.003)
    assert high.offset_rel == pytest.approx(0.03, abs=0.003)
    assert low.sd_rel == pytest.approx(math.hypot(0.01, 0.01), abs=0.0015)
    assert high.sd_rel == pytest.approx(math.hypot(0.02, 0.01), abs=0.0025)
    # cov = 0.01^2 over sds of 1.41% and 2.24%: r = 0.32
    assert split.common_corr == pytest.approx(0.0001 / (0.01414 * 0.02236), abs=0.1)


def test_a_per_request_metric_has_no_host_split() -> None:
    rows = {"trial": [0] * 4, "batch": [0] * 4, "arm": ["A", "A", "B", "B"], "host": [0, 0, 1, 1],
            "metric": ["latency"] * 4, "value": [1.0, 2.0, 1.0, 2.0]}  # fmt: skip
    assert noise_by_host(observations_from_table(pa.table(rows), source="x"), "latency") is None
