"""`[hosts] local_layout = "duet"` end to end: both arms of the sample service on one CPU,
the engine alone on the other, every batch's runs and the report saying so."""

from __future__ import annotations

import json
import os
from pathlib import Path

from experiment_files import write_experiment
from sqlalchemy import select
from test_lab_e2e import assert_nothing_left, run_to_end

from hairline.store.db import open_store
from hairline.store.models import Host, Run


def test_a_duet_runs_both_arms_on_one_cpu_and_the_engine_on_the_other(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: none from timing: where each arm ran is read, not how fast; the
    verdict is not checked (how precise a duet is, is bench/lab's question)."""
    cpus = sorted(os.sched_getaffinity(0))
    path = write_experiment(
        tmp_path / "duet",
        tag="duet",
        load={"rate_per_s": 300, "duration_s": 0.5},
        design={"trials": 1},
        hosts={"local_layout": "duet"},
    ).path
    home = tmp_path / "home"
    report = run_to_end(path, home, engine_path)
    store = open_store(home=home)
    try:
        with store.transaction() as session:
            runs = session.scalars(select(Run).order_by(Run.id)).all()
            hosts = {h.id: (h.name, h.cpus) for h in session.scalars(select(Host))}
    finally:
        store.close()
    shared = ",".join(map(str, cpus[:-1]))
    used = {hosts[r.host_id] for r in runs}
    # Two hosts, one per arm, with the same CPUs: all but the last, which the engine has.
    assert {name.rsplit(":", 1)[1] for name, _ in used} == {"a", "b"}
    assert {cpus_ for _, cpus_ in used} == {shared}
    # Both arms in each of the trial's two batches (a spoiled batch's runs would add to it).
    assert {(r.batch, r.arm) for r in runs} == {(0, "A"), (0, "B"), (1, "A"), (1, "B")}
    batch = json.loads((home / "experiments" / str(report["experiment_id"]) / "runs" /
                        "t0b0a1.batch.json").read_text())  # fmt: skip
    assert batch["engine_cpus"] == cpus[-1:]
    assert_nothing_left(home)
