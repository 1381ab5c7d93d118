"""What the lab's database says of its experiments, for the commands that show it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select
from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.lab.queue import require_experiment
from hairline.store.db import Store, pairs
from hairline.store.models import Experiment, Service, Trial, VerdictRow

__all__ = [
    "ExperimentRowJson",
    "Standing",
    "artifacts_dir",
    "experiment_rows",
    "phase_of",
    "standing",
]

# A trial in one of these will not run again: the experiment has moved on by one trial.
_ENDED_TRIALS = ("done", "excluded", "skipped")


def phase_of(store: Store, experiment_id: int) -> tuple[str, str]:
    """An experiment's phase and progress line; ("missing", "") if there is none."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        return (row.phase, row.progress) if row else ("missing", "")


@dataclass(frozen=True)
class Standing:
    """Where an experiment stands, for a command that waits on it."""

    phase: str  # "missing" when there is no such experiment
    progress: str
    trials_ended: int  # done, left out or not needed

    @property
    def waiting(self) -> bool:
        """Its processor last had to wait (for hosts, for a Ray head) instead of working."""
        return self.progress.startswith("waiting")


def standing(store: Store, experiment_id: int) -> Standing:
    """The experiment's phase, progress line and how many of its trials have ended."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        if row is None:
            return Standing("missing", "", 0)
        ended = session.scalar(
            select(func.count())
            .select_from(Trial)
            .where(Trial.experiment_id == experiment_id, Trial.state.in_(_ENDED_TRIALS))
        )
        return Standing(row.phase, row.progress, int(ended or 0))


def artifacts_dir(store: Store, experiment_id: int) -> Path:
    with store.transaction() as session:
        row = require_experiment(session, store, experiment_id)
        return Path(row.artifacts_dir)


@documented
class ExperimentRowJson(TypedDict):
    """One experiment as ``hairline status --json`` lists it, newest first."""

    id: int
    service: str
    kind: str
    """"ab" or "aa"."""
    team: str
    phase: str
    failure: str | None
    """The reason when the phase is failed."""
    progress: str
    """The processor's last progress line."""
    trials_done: int
    trials: int
    regressions: int
    """Deciding regressions."""
    created_at: float
    """Unix seconds."""
    lease_owner: str | None
    """The processor that holds it, while one does."""


def experiment_rows(store: Store, *, limit: int = 50) -> list[ExperimentRowJson]:
    """The newest experiments, one summary each (as `hairline status` lists them)."""
    with store.transaction() as session:
        done = pairs(
            session.execute(
                select(Trial.experiment_id, func.count())
                .where(Trial.state == "done")
                .group_by(Trial.experiment_id)
            )
        )
        total = pairs(
            session.execute(select(Trial.experiment_id, func.count()).group_by(Trial.experiment_id))
        )
        regressions = pairs(
            session.execute(
                select(VerdictRow.experiment_id, func.count())
                .where(VerdictRow.label == "regression", VerdictRow.deciding)
                .group_by(VerdictRow.experiment_id)
            )
        )
        rows = session.execute(
            select(Experiment, Service.name)
            .join(Service, Service.id == Experiment.service_id)
            .order_by(Experiment.id.desc())
            .limit(limit)
        ).all()
        return [
            {
                "id": e.id,
                "service": name,
                "kind": e.kind,
                "team": e.team,
                "phase": e.phase,
                "failure": e.failure,
                "progress": e.progress,
                "trials_done": done.get(e.id, 0),
                "trials": total.get(e.id, 0),
                "regressions": regressions.get(e.id, 0),
                "created_at": e.created_at,
                "lease_owner": e.lease_owner,
            }
            for e, name in rows
        ]
