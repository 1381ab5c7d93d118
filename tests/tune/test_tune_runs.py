"""Tuning runs in the database: what a stopped driver leaves (no evaluation "running"), and
an evaluation's count of its arm's failures kept across drivers (a resumed run goes on
counting), on a real SQLite store at the newest schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.lab.queue import enqueue
from hairline.store.db import Store
from hairline.tune import runs
from hairline.tune.apply import batch_experiments
from hairline.tune.config import TuningSpec
from hairline.tune.loop import _reopen_interrupted

CANDIDATES = [{"log_batch": 64, "log_codec": "none"}, {"log_batch": 256, "log_codec": "fast"}]


@pytest.fixture
def store(sqlite_store: Store) -> Store:
    """One SQLite store (tests/tune/conftest.py), not the root's SQLite and PostgreSQL."""
    return sqlite_store


def queued(store: Store, spec: TuningSpec, tmp_path: Path) -> tuple[int, list[int]]:
    """A run with two evaluations, each queued in its own experiment (as the loop does)."""
    run_id = runs.create_run(store, spec)
    positions = runs.add_proposed(store, run_id, 1, CANDIDATES)
    ids = []
    for position, config in zip(positions, CANDIDATES, strict=True):
        [(experiment, _)] = batch_experiments(spec, [(position, config)], tmp_path)
        ids.append(enqueue(store, experiment, kind="ab", origin="tune"))
        runs.set_experiment(store, run_id, [position], ids[-1], [f"c{position + 1}"])
    return run_id, ids


def test_a_stopped_driver_leaves_its_evaluations_interrupted_not_running(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    run_id, _ = queued(store, spec, tmp_path)
    runs.record(store, run_id, 0, "done", value=0.1)
    assert runs.interrupt_running(store, run_id, runs.interrupted_reason(run_id)) == 1
    rows = runs.evaluations(store, run_id)
    assert [r.status for r in rows] == ["done", "interrupted"]
    assert rows[1].reason.endswith(f"`hairline tune FILE --resume {run_id}` takes it up")


def test_a_resumed_run_waits_again_for_an_experiment_that_is_still_queued(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    """--no-process: the driver stopped, the lab's processors still hold its experiment."""
    run_id, ids = queued(store, spec, tmp_path)
    runs.interrupt_running(store, run_id, runs.interrupted_reason(run_id))
    _reopen_interrupted(store, spec, run_id, clock=lambda: 5.0)
    rows = runs.evaluations(store, run_id)
    assert [(r.status, r.experiment_id, r.reason) for r in rows] == [
        ("running", ids[0], ""), ("running", ids[1], "")]  # fmt: skip


def test_an_arm_failure_count_is_kept_for_the_next_driver(
    spec: TuningSpec, store: Store, tmp_path: Path
) -> None:
    run_id, _ = queued(store, spec, tmp_path)
    runs.record(store, run_id, 1, "proposed", candidate_failures=1, reason="its arm failed")
    again = runs.evaluations(store, run_id)[1]
    assert (again.status, again.candidate_failures) == ("proposed", 1)
    assert runs.load_run(store, run_id).summary["infeasible_after_failures"] == 2
