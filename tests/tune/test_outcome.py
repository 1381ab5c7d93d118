"""Whose fault a failed tuning experiment is, and when a candidate becomes infeasible: only
when its own arm failed (not the default's), and only after ``infeasible_after_failures``
experiments; one noisy load-gate failure does not bar a configuration for the whole run.

The failure messages are the lab's own: built by the validity rules (lab/validity.py) with
the engine's rate-gate wording, as the runner and the trial loop wrap them."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from hairline.config import ExperimentConfig
from hairline.lab.queue import enqueue
from hairline.lab.validity import ArmReading, batch_problems
from hairline.store.db import Store
from hairline.store.models import Experiment
from hairline.tune.apply import CONTROL_ARM, batch_experiments
from hairline.tune.config import TuningSpec
from hairline.tune.outcome import Found, blamed_arms, read_outcome, settle


def rate_gate_detail(target: str, off: float) -> str:
    """The engine's rate gate detail (engine/src/load/validity.rs, rate_gate)."""
    return f"target {target} got {off:.2f}% off its scheduled rate (limit 5%)"


def left_out_everywhere(problems: list[str], trials: int = 3) -> str:
    """An experiment's failure when every trial was left out (runner.TrialLeftOut wrapped by
    trialrun._after_trials), each trial's batch spoiled by ``problems``."""
    note = f"batch 1 was spoiled in all 1 attempts (last: {'; '.join(problems)})"
    return "every trial was left out: " + "; ".join([note] * trials)


def reading(*, running: bool = True, errors: int = 0) -> ArmReading:
    return ArmReading(requests=1000, errors=errors, cpu_ns=10**8, cpus=1, running=running)


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """One SQLite store (tests/tune/conftest.py), not the root's SQLite and PostgreSQL."""
    return sqlite_store


def failed_experiment(store: Store, config: ExperimentConfig, failure: str) -> int:
    """An experiment queued as the loop queues it, then ended failed as the lab ends it."""
    experiment_id = enqueue(store, config, kind="ab", origin="tune")
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        assert row is not None
        row.phase, row.failure, row.finished_at = "failed", failure, time.time()
    return experiment_id


def test_the_load_gate_names_the_target_that_fell_behind() -> None:
    problems = batch_problems(
        {"default": reading(), "c3": reading()},
        failed_gates=[("rate", rate_gate_detail("default", 7.1))],
        wall_s=2.0,
        max_error_rate=0.01,
    )
    failure = left_out_everywhere(problems)
    assert blamed_arms(failure, ["c3", CONTROL_ARM]) == {CONTROL_ARM}


def test_an_arm_that_crashed_or_answered_errors_is_named_and_c1_is_not_c12() -> None:
    problems = batch_problems(
        {"default": reading(), "c12": reading(running=False), "c2": reading(errors=200)},
        failed_gates=[],
        wall_s=2.0,
        max_error_rate=0.01,
    )
    failure = left_out_everywhere(problems)
    assert blamed_arms(failure, ["c1", "c12", "c2", CONTROL_ARM]) == {"c12", "c2"}


def test_a_start_failure_names_its_arm_and_the_hypervisor_names_no_one() -> None:
    start = "arm c3: exited with status 2 before it became healthy: bad --log-codec"
    assert blamed_arms(start, ["c3", CONTROL_ARM]) == {"c3"}
    steal = batch_problems(
        {"default": reading(), "c3": reading()},
        failed_gates=[],
        wall_s=2.0,
        max_error_rate=0.01,
        steal_share={"default": 0.01, "c3": 0.2},
    )
    assert steal and blamed_arms(left_out_everywhere(steal), ["c3", CONTROL_ARM]) == set()


def test_a_default_that_could_not_carry_the_load_is_not_the_candidates_fault(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    """The issue's case: the load gate failed on the default arm; the candidate is not
    marked infeasible, the run stops (resumable) and says whose arm failed."""
    [(config, _)] = batch_experiments(spec, [(2, {"log_batch": 1024, "log_codec": "fast"})],
                                      tmp_path)  # fmt: skip
    problems = batch_problems({"default": reading(), "c3": reading()},
                              failed_gates=[("rate", rate_gate_detail("default", 6.4))],
                              wall_s=2.0, max_error_rate=0.01)  # fmt: skip
    experiment_id = failed_experiment(store, config, left_out_everywhere(problems))
    found = read_outcome(store, spec, experiment_id, "c3")
    assert found.status == "failed"
    assert "on the default arm: not the candidate's fault" in found.reason


def test_the_candidates_own_failure_is_counted_not_yet_infeasible(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    [(config, _)] = batch_experiments(spec, [(2, {"log_batch": 1024, "log_codec": "fast"})],
                                      tmp_path)  # fmt: skip
    problems = batch_problems({"default": reading(), "c3": reading()},
                              failed_gates=[("rate", rate_gate_detail("c3", 9.0))],
                              wall_s=2.0, max_error_rate=0.01)  # fmt: skip
    experiment_id = failed_experiment(store, config, left_out_everywhere(problems))
    found = read_outcome(store, spec, experiment_id, "c3")
    assert found.status == "arm_failed"
    assert spec.infeasible_after_failures == 2  # the default rule
    again, failures = settle(found, 0, spec.infeasible_after_failures)
    assert (again.status, failures) == ("proposed", 1)
    assert "1 of the 2 experiments" in again.reason and "target c3 got 9.00%" in again.reason


def test_infeasible_only_at_the_configured_count_with_the_rule_in_its_reason() -> None:
    failed = Found("arm_failed", reason="experiment 7: arm c3: exited before it became healthy")
    first, count = settle(failed, 0, 3)
    second, count = settle(failed, count, 3)
    third, count = settle(failed, count, 3)
    assert [first.status, second.status, third.status] == ["proposed", "proposed", "infeasible"]
    assert count == 3
    assert third.reason.startswith("infeasible: its arm failed (and the default arm did not) in 3")
    assert "infeasible_after_failures = 3" in third.reason and "experiment 7" in third.reason


def test_once_is_enough_when_the_file_says_so() -> None:
    failed = Found("arm_failed", reason="experiment 7: arm c3: exited")
    assert settle(failed, 0, 1)[0].status == "infeasible"


def test_what_is_not_an_arm_failure_stands_and_is_not_counted() -> None:
    broke = Found("infeasible", reason="error_rate 0.01 is above its max 0.001")
    for found in (Found("done", value=0.1), Found("failed", reason="no hosts"), broke):
        assert settle(found, 1, 2) == (found, 1)


def test_another_candidates_failure_in_a_shared_experiment_runs_this_one_again(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    """shared_control: c1, c2 and the default in one experiment; c2 would not start."""
    shared = dataclasses.replace(spec, shared_control=True)
    [(config, positions)] = batch_experiments(
        shared, [(0, {"log_batch": 64, "log_codec": "none"}),
                 (1, {"log_batch": 2048, "log_codec": "small"})], tmp_path)  # fmt: skip
    assert positions == (0, 1)
    experiment_id = failed_experiment(store, config, "arm c2: exited before it became healthy")
    assert read_outcome(store, shared, experiment_id, "c2").status == "arm_failed"
    other = read_outcome(store, shared, experiment_id, "c1")
    assert other.status == "proposed" and "on the arm of c2, not this candidate's" in other.reason
    assert settle(other, 0, 2) == (other, 0)  # not counted against c1
