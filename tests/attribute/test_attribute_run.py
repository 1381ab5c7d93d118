"""An attribution run's plan: groups made experiments, written and read back, refused when
the files changed; the gathering of runs' latencies is covered end to end."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hairline.attribute.config import load_attribution_file
from hairline.attribute.run import (
    PLAN_FILE,
    _save,
    arm_name,
    group_experiment,
    load_plan,
    plan_runs,
)
from hairline.errors import ConfigError, DataError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sample-service"


def copy_example(tmp_path: Path) -> Path:
    for name in ("service.toml", "trace.jsonl", "attribute-experiment.toml", "attribute.toml"):
        shutil.copy(EXAMPLES / name, tmp_path / name)
    return tmp_path / "attribute.toml"


def test_each_group_is_an_experiment_of_one_arm_per_run(tmp_path: Path) -> None:
    spec = load_attribution_file(copy_example(tmp_path))
    plan = plan_runs(spec)
    assert sum(len(g) for g in plan.groups) == 12 and len(plan.groups) == 6
    group = plan.groups[0]
    config = group_experiment(spec, group, tmp_path / "treatments")
    assert list(config.arms) == [arm_name(r) for r in group]
    assert config.baseline == arm_name(group[0])
    assert config.design.trials == 1
    for run in group:
        treatment = spec.treatments[run.treatment]
        assert config.arms[arm_name(run)].args == spec.arm(treatment, run=run.index + 1).args
    assert plan_runs(spec).groups == plan.groups  # seeded


def test_every_stalled_run_stalls_its_own_requests_and_a_rerun_the_same(tmp_path: Path) -> None:
    # The example's stall level passes --stall-seed {run}: a replayed trace repeats its
    # request ids, so without it the six stalled runs would all stall the same requests.
    spec = load_attribution_file(copy_example(tmp_path))

    def stall_seeds() -> list[str]:
        seeds = []
        for group in plan_runs(spec).groups:
            config = group_experiment(spec, group, tmp_path / "treatments")
            for run in group:
                args = config.arms[arm_name(run)].args
                if "--stall-every" in args:
                    seeds.append(args[args.index("--stall-seed") + 1])
        return seeds

    seeds = stall_seeds()
    assert len(seeds) == 6 and len(set(seeds)) == 6, seeds
    assert stall_seeds() == seeds


def test_a_plan_is_read_back_and_refused_once_the_file_changed(tmp_path: Path) -> None:
    path = copy_example(tmp_path)
    spec = load_attribution_file(path)
    plan = plan_runs(spec)
    plan.experiments[0] = 17
    _save(plan, tmp_path / "out")
    again = load_plan(spec, tmp_path / "out")
    assert again.groups == plan.groups and again.experiments[0] == 17
    assert not (tmp_path / "out" / (PLAN_FILE + ".partial")).exists()

    path.write_text(path.read_text().replace("seed = 1", "seed = 2"))
    with pytest.raises(ConfigError, match="changed since the run"):
        load_plan(load_attribution_file(path), tmp_path / "out")


def test_a_missing_or_foreign_plan_says_what_to_do(tmp_path: Path) -> None:
    spec = load_attribution_file(copy_example(tmp_path))
    with pytest.raises(DataError, match="--output folder"):
        load_plan(spec, tmp_path / "nowhere")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / PLAN_FILE).write_text(json.dumps({"version": 1}))
    with pytest.raises(DataError, match="not an attribution plan"):
        load_plan(spec, tmp_path / "x")
