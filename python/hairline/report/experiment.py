"""An experiment's report model, read from the lab's database and artifact folder."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, select

from hairline.config import ExperimentConfig
from hairline.errors import HairlineError
from hairline.lab.analysis import Analysis
from hairline.lab.processor import analyze_experiment, experiment_observations
from hairline.report.context import ArmReport, ExperimentReport, HostReport, load_notes
from hairline.store.db import Store
from hairline.store.models import Arm, Experiment, Host, Run, Service, Trial
from hairline.store.observations import Observations, observations_from_table

__all__ = ["load_report"]


def _load_summaries(runs: Path) -> dict[str, dict[str, object]]:
    """The engine's summary of each batch's measurement (``runs/t<trial>b<batch>.json``);
    an unreadable one is skipped: the report must not fail over a note."""
    summaries: dict[str, dict[str, object]] = {}
    for path in sorted(runs.glob("t*b*.json")):
        try:
            summaries[path.stem] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
    return summaries


def _time(value: float | None) -> datetime | None:
    return datetime.fromtimestamp(value, tz=UTC) if value is not None else None


def load_report(store: Store, experiment_id: int) -> ExperimentReport:
    """Everything a report shows about ``experiment_id``; analyses it again if it finished
    (deterministic: same seed, same A/A history as when it was analysed)."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        if row is None:
            raise HairlineError(
                f"no experiment {experiment_id} in {store.url}",
                hint="`hairline status` lists the experiments",
            )
        service = session.get(Service, row.service_id)
        arms = session.scalars(
            select(Arm).where(Arm.experiment_id == experiment_id).order_by(Arm.position)
        ).all()
        done = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.experiment_id == experiment_id, Trial.state == "done")
        )
        host_rows = session.execute(
            select(Run.host_index, Host.cpus, Run.facts)
            .join(Host, Host.id == Run.host_id)
            .where(Run.experiment_id == experiment_id)
            .order_by(Run.id)
        ).all()
        config = ExperimentConfig.model_validate(json.loads(row.spec))
        artifacts = Path(row.artifacts_dir)
        hosts: dict[int, HostReport] = {}
        for index, cpus, facts in host_rows:
            hosts.setdefault(
                index,
                HostReport(
                    host=index,
                    cpus=tuple(int(c) for c in cpus.split(",")),
                    facts=json.loads(facts),
                ),
            )
        arm_reports = tuple(
            ArmReport(
                name=a.name,
                source=a.source,
                build_key=a.build_key,
                build_cached=a.build_cached,
                build_log=Path(a.build_log) if a.build_log else None,
            )
            for a in arms
        )
        phase, failure, kind = row.phase, row.failure, row.kind
        created, started, finished = row.created_at, row.started_at, row.finished_at
    analysis: Analysis | None = None
    observations: Observations | None = None
    table = experiment_observations(store, experiment_id)
    if table is not None:
        observations = observations_from_table(table, source=f"experiment {experiment_id}")
    if phase == "done":
        inputs = artifacts / "analysis.json"
        history_ids = (
            json.loads(inputs.read_text()).get("history_experiments") if inputs.exists() else None
        )
        if kind == "aa":
            config = config.as_aa()
        analysis = analyze_experiment(store, experiment_id, config, history_ids=history_ids)
    html = artifacts / "report.html"
    return ExperimentReport(
        experiment_id=experiment_id,
        service=service.name if service else config.service.name,
        kind="aa" if kind == "aa" else "ab",
        phase=phase,
        failure=failure,
        created_at=_time(created) or datetime.now(tz=UTC),
        started_at=_time(started),
        finished_at=_time(finished),
        design=config.design.name,
        trials=config.design.trials,
        trials_done=int(done or 0),
        rate_per_s=config.load.rate_per_s,
        duration_s=config.load.duration_s,
        model=config.analysis.model,
        arms=arm_reports,
        hosts=tuple(hosts[i] for i in sorted(hosts)),
        analysis=analysis,
        observations=observations,
        html_path=html if html.exists() else None,
        notes=load_notes(_load_summaries(artifacts / "runs")),
    )
