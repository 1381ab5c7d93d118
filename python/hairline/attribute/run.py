"""An attribution run through the lab: the design's runs grouped into ordinary experiments
(one arm per run, side by side on the lab's hosts, swapped between batches), each processed
like `hairline run`'s, then every run's per-request latency gathered for the model.

Nothing lives only in memory: the plan (the groups, the run order, the experiment of each
group as soon as it is queued) is written to ``plan.json`` in the output folder before any
experiment runs and after each is queued, so ``--resume`` finishes a run that was stopped,
queueing again only the groups whose experiment did not end.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
from numpy.typing import NDArray
from sqlalchemy import select

from hairline.attribute.config import AttributionSpec
from hairline.attribute.design import Run, run_groups
from hairline.collect.registry import LATENCY
from hairline.config import ExperimentConfig
from hairline.errors import ConfigError, DataError, HairlineError
from hairline.kit.atomic import write_text_atomic
from hairline.lab.results import experiment_observations
from hairline.store.db import Store
from hairline.store.models import Experiment

__all__ = [
    "Lab",
    "Measured",
    "Plan",
    "arm_name",
    "gather",
    "group_experiment",
    "plan_runs",
    "run_attribution",
]

PLAN_FILE = "plan.json"
_PLAN_VERSION = 1


class AttributionStopped(HairlineError):
    """An experiment of the run failed; the plan is kept and ``--resume`` goes on."""


@dataclass(frozen=True)
class Lab:
    """How the run reaches the lab: ``enqueue`` queues an experiment and gives its id,
    ``finish`` takes it to its end, ``on_event`` gets progress lines."""

    enqueue: Callable[[ExperimentConfig], int]
    finish: Callable[[int], None]
    on_event: Callable[[str], None] = lambda line: None


@dataclass
class Plan:
    """The runs in their groups, in the order they are measured, and each group's
    experiment once queued. ``digest`` ties the plan to the files it came from."""

    digest: str
    groups: list[list[Run]]
    experiments: list[int | None] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": _PLAN_VERSION,
            "digest": self.digest,
            "groups": [[[r.index, r.treatment, r.repetition] for r in g] for g in self.groups],
            "experiments": self.experiments,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], path: Path) -> Plan:
        try:
            if data["version"] != _PLAN_VERSION:
                raise ValueError(f"version {data['version']}")
            groups = [[Run(int(i), int(t), int(r)) for i, t, r in g] for g in data["groups"]]
            experiments = [None if e is None else int(e) for e in data["experiments"]]
            return cls(str(data["digest"]), groups, experiments)
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"{path} is not an attribution plan: {err}",
                            hint="start afresh without --resume") from err  # fmt: skip


def arm_name(run: Run) -> str:
    """The arm of a run in its experiment: r1, r2, ... by the run's index."""
    return f"r{run.index + 1}"


def _digest(spec: AttributionSpec) -> str:
    """What the plan depends on: the attribution file and the experiment file's bytes."""
    h = hashlib.sha256()
    for path in (spec.path, Path(spec.experiment.source or spec.path)):
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(str(path).encode())
    return h.hexdigest()[:16]


def plan_runs(spec: AttributionSpec) -> Plan:
    """The design's runs grouped and ordered (seeded): a pure function of the file."""
    groups = run_groups(
        spec.treatments,
        spec.design.repetitions,
        group_size=spec.design.runs_per_experiment,
        together=spec.load_factors,
        seed=spec.design.seed,
    )
    return Plan(_digest(spec), groups, [None] * len(groups))


def group_experiment(spec: AttributionSpec, group: Sequence[Run], folder: Path) -> ExperimentConfig:
    """One group's experiment: an arm per run, the group's load, one trial (its batches
    swap the arms between the hosts, so every run meets every host). A [template] is
    rendered per treatment under ``folder``."""
    arms = {
        arm_name(r): spec.arm(
            spec.treatments[r.treatment], folder / f"t{r.treatment + 1}", run=r.index + 1
        )
        for r in group
    }
    load = spec.load(spec.treatments[group[0].treatment])
    design = spec.experiment.design.model_copy(update={"trials": 1, "decide_on": [LATENCY.name]})
    return spec.experiment.model_copy(
        update={"arms": arms, "baseline": arm_name(group[0]), "load": load, "design": design}
    )


def _save(plan: Plan, folder: Path) -> None:
    write_text_atomic(folder / PLAN_FILE, json.dumps(plan.to_json(), indent=1) + "\n")


def load_plan(spec: AttributionSpec, folder: Path) -> Plan:
    """The plan a stopped run left in ``folder``; refused if the files changed since."""
    path = folder / PLAN_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {path}: {err}",
                        hint="give the --output folder of the run to resume") from err  # fmt: skip
    plan = Plan.from_json(data, path)
    if plan.digest != _digest(spec):
        raise ConfigError(
            f"{spec.path} or its experiment file changed since the run in {folder} started",
            hint="put the files back as they were, or start a new run in another folder",
        )
    return plan


def _phase(store: Store, experiment_id: int) -> tuple[str, str | None]:
    with store.transaction() as session:
        row = session.execute(
            select(Experiment.phase, Experiment.failure).where(Experiment.id == experiment_id)
        ).one_or_none()
    return ("gone", None) if row is None else (str(row[0]), row[1])


def run_attribution(
    store: Store, spec: AttributionSpec, lab: Lab, folder: Path, *, resume: bool = False
) -> Plan:
    """Measure every group not yet measured; the plan, every experiment done.

    Raises :class:`AttributionStopped` when an experiment fails (the plan is kept)."""
    plan = load_plan(spec, folder) if resume else plan_runs(spec)
    _save(plan, folder)
    total = len(plan.groups)
    for position, group in enumerate(plan.groups):
        known = plan.experiments[position]
        if known is not None and _phase(store, known)[0] == "done":
            continue
        config = group_experiment(spec, group, folder / "treatments")
        experiment_id = lab.enqueue(config)
        plan.experiments[position] = experiment_id
        _save(plan, folder)
        treatments = ", ".join(
            f"{arm_name(r)}: "
            + " ".join(f"{k}={v}" for k, v in spec.treatments[r.treatment].items())
            for r in group
        )
        lab.on_event(f"experiment {experiment_id} ({position + 1}/{total}): {treatments}")
        lab.finish(experiment_id)
        phase, failure = _phase(store, experiment_id)
        if phase != "done":
            raise AttributionStopped(
                f"experiment {experiment_id} of the attribution ended {phase}: {failure or '?'}",
                hint=f"fix the cause, then `hairline attribute {spec.path} --output {folder} "
                "--resume`",
            )
    return plan


@dataclass(frozen=True)
class Measured:
    """Every run's successful requests: latency (µs), the run of each, each run's levels,
    and what the engine's gates said about the runs."""

    latency_us: NDArray[np.float64]
    run_of: NDArray[np.int64]
    run_levels: tuple[dict[str, str], ...]
    warnings: tuple[str, ...]


def gather(store: Store, spec: AttributionSpec, plan: Plan) -> Measured:
    """The per-request latencies of every run of a finished plan, renumbered 0..R-1 in run
    order, with a warning for each batch that was spoiled and rerun or whose engine gates
    (late sends, the Poisson fit) failed: a tail measured then is the harness's too."""
    runs = sorted((r for g in plan.groups for r in g), key=lambda r: r.index)
    position = {r.index: i for i, r in enumerate(runs)}
    latency: list[NDArray[np.float64]] = []
    run_of: list[NDArray[np.int64]] = []
    warnings: list[str] = []
    for group, experiment_id in zip(plan.groups, plan.experiments, strict=True):
        if experiment_id is None:
            raise DataError("the plan has a group that was never measured",
                            hint="finish it with --resume")  # fmt: skip
        table = experiment_observations(store, experiment_id)
        if table is None:
            raise DataError(f"experiment {experiment_id} has no observations",
                            hint="it ended without a done trial; rerun with --resume")  # fmt: skip
        table = table.filter(pc.equal(table["metric"], LATENCY.name))
        arms = table["arm"].to_numpy(zero_copy_only=False)
        values = table["value"].to_numpy()
        for run in group:
            mine = values[arms == arm_name(run)].astype(np.float64)
            if mine.size == 0:
                raise DataError(f"run {arm_name(run)} of experiment {experiment_id} served "
                                "no request", hint="look at the experiment's report")  # fmt: skip
            latency.append(mine)
            run_of.append(np.full(mine.size, position[run.index], dtype=np.int64))
        warnings += _gate_warnings(store, experiment_id)
    return Measured(
        latency_us=np.concatenate(latency),
        run_of=np.concatenate(run_of),
        run_levels=tuple(dict(spec.treatments[r.treatment]) for r in runs),
        warnings=tuple(warnings),
    )


def _gate_warnings(store: Store, experiment_id: int) -> list[str]:
    with store.transaction() as session:
        folder = session.scalar(
            select(Experiment.artifacts_dir).where(Experiment.id == experiment_id)
        )
    found: list[str] = []
    for record_path in sorted(Path(folder or "").glob("runs/*.batch.json")):
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError):
            continue
        tag = record_path.name.removesuffix(".batch.json")
        if not record.get("accepted", True):
            found.append(f"experiment {experiment_id} {tag}: spoiled and run again "
                         f"({'; '.join(record.get('problems', []))})")  # fmt: skip
            continue
        summary = record_path.with_name(f"{tag}.json")
        try:
            gates = json.loads(summary.read_text()).get("gates", [])
        except (OSError, ValueError):
            continue
        failed = [f"{g.get('name')} ({g.get('detail', '')})" for g in gates if not g.get("passed")]
        if failed:
            found.append(f"experiment {experiment_id} {tag}: engine gates failed: "
                         f"{', '.join(failed)}")  # fmt: skip
    return found
