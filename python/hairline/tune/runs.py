"""Tuning runs in the database: created, resumed (by one driver at a time), their
evaluations proposed, queued and recorded. Every change is one transaction, so a driver that
dies loses nothing: the next one finds each evaluation where it was left.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from hairline.errors import ConfigError, HairlineError
from hairline.store.db import Store
from hairline.store.models import TuningEvaluation, TuningRun
from hairline.tune.config import TuningSpec
from hairline.tune.space import Configuration

__all__ = [
    "DRIVER_STALE_S",
    "EvaluationRow",
    "RunRow",
    "add_proposed",
    "create_run",
    "evaluations",
    "file_digest",
    "interrupt_running",
    "interrupted_reason",
    "list_runs",
    "load_run",
    "record",
    "set_experiment",
    "set_state",
    "take_over",
]

Clock = Callable[[], float]
# A driver beats every few seconds; one silent this long is dead, and its run may be resumed.
DRIVER_STALE_S = 30.0


@dataclass(frozen=True)
class RunRow:
    id: int
    name: str
    service: str
    searcher: str
    state: str
    reason: str
    source_file: str
    digest: str
    # The tuning file as read when the run started: metric, higher_is_better, evaluations,
    # batch_size, seed, default, infeasible_after_failures.
    summary: dict[str, Any]
    clusters: dict[str, Any]
    aa_experiment_id: int | None
    created_at: float
    finished_at: float | None
    # The driver's last sign of life (None once the run ended): a "running" run silent for
    # DRIVER_STALE_S has no driver (it was killed), whatever its state says.
    heartbeat_at: float | None = None


@dataclass(frozen=True)
class EvaluationRow:
    position: int
    batch: int
    config: Configuration
    status: str
    experiment_id: int | None
    arm: str
    value: float | None
    se: float | None
    effect_rel: float | None
    ci_low: float | None
    ci_high: float | None
    mean_control: float | None
    mean_candidate: float | None
    reason: str
    # Experiments in which the candidate's arm alone failed (tune/outcome.settle).
    candidate_failures: int = 0


def file_digest(spec: TuningSpec) -> str:
    """What the run was started from: the searcher and budget (the command line may change
    them) and the tuning file's and the experiment file's bytes. A resumed run whose files
    changed would mix two searches."""
    digest = hashlib.sha256(f"{spec.searcher}\0{spec.evaluations}\0".encode())
    for path in (spec.path, spec.experiment.source):
        digest.update(str(path).encode() + b"\0")
        if path and os.path.exists(path):
            digest.update(Path(path).read_bytes())
    return digest.hexdigest()


def _me() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def create_run(store: Store, spec: TuningSpec, *, clock: Clock = time.time) -> int:
    now = clock()
    summary = {
        "digest": file_digest(spec),
        "name": spec.name,
        "metric": spec.metric,
        "higher_is_better": spec.higher_is_better,
        "evaluations": spec.evaluations,
        "batch_size": spec.batch_size,
        "seed": spec.seed,
        "default": spec.default,
        "infeasible_after_failures": spec.infeasible_after_failures,
    }
    with store.transaction() as session:
        row = TuningRun(
            name=spec.name,
            service=spec.experiment.service.name,
            team=spec.experiment.team,
            searcher=spec.searcher,
            spec=json.dumps(summary),
            source_file=str(spec.path),
            state="running",
            reason="",
            clusters="",
            driver=_me(),
            heartbeat_at=now,
            created_at=now,
            updated_at=now,
        )
        session.add(row)
        session.flush()
        return row.id


def _run_row(row: TuningRun) -> RunRow:
    summary = json.loads(row.spec)
    return RunRow(
        id=row.id,
        name=row.name,
        service=row.service,
        searcher=row.searcher,
        state=row.state,
        reason=row.reason,
        source_file=row.source_file,
        digest=str(summary.get("digest", "")),
        summary=summary,
        clusters=json.loads(row.clusters) if row.clusters else {},
        aa_experiment_id=row.aa_experiment_id,
        created_at=row.created_at,
        finished_at=row.finished_at,
        heartbeat_at=row.heartbeat_at,
    )


def load_run(store: Store, run_id: int) -> RunRow:
    with store.transaction() as session:
        row = session.get(TuningRun, run_id)
        if row is None:
            raise ConfigError(
                f"there is no tuning run {run_id} in {store.shown_url}",
                hint="`hairline tune list` shows the runs (use the same --db/--home)",
            )
        return _run_row(row)


def take_over(store: Store, run_id: int, spec: TuningSpec, *, clock: Clock = time.time) -> RunRow:
    """Make this process the run's driver, if the run was started from the same files and
    no live driver holds it."""
    now = clock()
    with store.transaction() as session:
        row = session.get(TuningRun, run_id, with_for_update=True)
        if row is None:
            raise ConfigError(
                f"there is no tuning run {run_id} in {store.shown_url}",
                hint="`hairline tune list` shows the runs",
            )
        current = _run_row(row)
        if current.digest != file_digest(spec):
            raise ConfigError(
                f"tuning run {run_id} was started from other contents of {row.source_file} "
                "or its experiment file",
                hint="resume with the files as they were, or start a new run (without --resume)",
            )
        if row.state == "refused":
            raise HairlineError(
                f"tuning run {run_id} was refused: {row.reason}",
                hint="start a new run once the clusters pass their A/A",
            )
        fresh = row.heartbeat_at is not None and now - row.heartbeat_at < DRIVER_STALE_S
        if row.state == "running" and fresh and row.driver != _me():
            raise HairlineError(
                f"tuning run {run_id} is being driven by {row.driver} (last seen "
                f"{now - (row.heartbeat_at or now):.0f} s ago)",
                hint=f"wait for it, or stop that process; a driver silent for "
                f"{DRIVER_STALE_S:g} s may be taken over",
            )
        row.driver, row.heartbeat_at, row.updated_at = _me(), now, now
        if row.state != "done":
            row.state, row.reason, row.finished_at = "running", "", None
        return _run_row(row)


def beat(store: Store, run_id: int, *, clock: Clock = time.time) -> None:
    with store.transaction() as session:
        row = session.get(TuningRun, run_id)
        if row is not None and row.driver == _me():
            row.heartbeat_at = clock()


def set_state(
    store: Store,
    run_id: int,
    state: str,
    reason: str = "",
    *,
    clusters: dict[str, Any] | None = None,
    aa_experiment_id: int | None = None,
    clock: Clock = time.time,
) -> None:
    now = clock()
    with store.transaction() as session:
        row = session.get(TuningRun, run_id)
        assert row is not None
        row.state, row.reason, row.updated_at = state, reason, now
        if clusters is not None:
            row.clusters = json.dumps(clusters)
        if aa_experiment_id is not None:
            row.aa_experiment_id = aa_experiment_id
        if state in ("done", "failed", "refused"):
            row.finished_at = now
            row.heartbeat_at = None


def _evaluation_row(row: TuningEvaluation) -> EvaluationRow:
    return EvaluationRow(
        position=row.position,
        batch=row.batch,
        config=json.loads(row.config),
        status=row.status,
        experiment_id=row.experiment_id,
        arm=row.arm,
        value=row.value,
        se=row.se,
        effect_rel=row.effect_rel,
        ci_low=row.ci_low,
        ci_high=row.ci_high,
        mean_control=row.mean_control,
        mean_candidate=row.mean_candidate,
        reason=row.reason,
        candidate_failures=row.candidate_failures or 0,
    )


def evaluations(store: Store, run_id: int) -> list[EvaluationRow]:
    with store.transaction() as session:
        rows = session.scalars(
            select(TuningEvaluation)
            .where(TuningEvaluation.run_id == run_id)
            .order_by(TuningEvaluation.position)
        ).all()
        return [_evaluation_row(r) for r in rows]


def add_proposed(
    store: Store,
    run_id: int,
    batch: int,
    configs: Sequence[Configuration],
    *,
    clock: Clock = time.time,
) -> list[int]:
    """Write a batch's candidates before anything runs them; their positions."""
    now = clock()
    with store.transaction() as session:
        last = session.scalars(
            select(TuningEvaluation.position)
            .where(TuningEvaluation.run_id == run_id)
            .order_by(TuningEvaluation.position.desc())
            .limit(1)
        ).first()
        start = 0 if last is None else last + 1
        for offset, config in enumerate(configs):
            session.add(
                TuningEvaluation(
                    run_id=run_id,
                    position=start + offset,
                    batch=batch,
                    config=json.dumps(config),
                    status="proposed",
                    arm="",
                    reason="",
                    created_at=now,
                )
            )
        return list(range(start, start + len(configs)))


def _evaluation(session: Any, run_id: int, position: int) -> TuningEvaluation:
    row = session.scalars(
        select(TuningEvaluation).where(
            TuningEvaluation.run_id == run_id, TuningEvaluation.position == position
        )
    ).one()
    assert isinstance(row, TuningEvaluation)
    return row


def set_experiment(
    store: Store, run_id: int, positions: Sequence[int], experiment_id: int, arms: Sequence[str]
) -> None:
    with store.transaction() as session:
        for position, arm in zip(positions, arms, strict=True):
            row = _evaluation(session, run_id, position)
            row.status, row.experiment_id, row.arm = "running", experiment_id, arm


def record(
    store: Store,
    run_id: int,
    position: int,
    status: str,
    *,
    clock: Clock = time.time,
    **values: int | float | str | None,
) -> None:
    """An evaluation's end: done (with value, se, effect...), infeasible or failed; or
    proposed again, or interrupted (the run stopped while its experiment ran)."""
    with store.transaction() as session:
        row = _evaluation(session, run_id, position)
        row.status, row.finished_at = status, clock()
        for name, value in values.items():
            setattr(row, name, value)


def interrupted_reason(run_id: int) -> str:
    """Why an evaluation is ``interrupted``: what a user reads in ``tuning show``."""
    return (
        "the run stopped while its experiment was queued or running; "
        f"`hairline tune FILE --resume {run_id}` takes it up"
    )


def interrupt_running(store: Store, run_id: int, reason: str, *, clock: Clock = time.time) -> int:
    """Every evaluation of the run still ``running`` marked ``interrupted`` with ``reason``
    (its driver stops: nothing watches its experiment any more); how many."""
    with store.transaction() as session:
        rows = session.scalars(
            select(TuningEvaluation).where(
                TuningEvaluation.run_id == run_id, TuningEvaluation.status == "running"
            )
        ).all()
        for row in rows:
            row.status, row.reason, row.finished_at = "interrupted", reason, clock()
        return len(rows)


def list_runs(store: Store, *, service: str | None = None, limit: int = 50) -> list[RunRow]:
    """The newest runs first."""
    with store.transaction() as session:
        query = select(TuningRun).order_by(TuningRun.id.desc()).limit(limit)
        if service is not None:
            query = query.where(TuningRun.service == service)
        return [_run_row(r) for r in session.scalars(query).all()]
