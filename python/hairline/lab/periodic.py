"""Periodic A/A runs (``[aa] every`` in a service file): schedules, which are due, enqueued.

A schedule is a row of ``aa_schedules`` naming an experiment file whose service asks for
A/A runs every so often (ServiceLab section 4.2 runs them every two hours; their results
give each metric's false-positive rate, and ``lab/results.py`` feeds them to adaptive
model selection). A schedule is *due* when ``next_at <= now``. A due schedule:

- waits while its last A/A run is still active (never two at once);
- reads its file anew (it may have changed since ``schedule add``); a file that became
  invalid is skipped for this period with a warning, the schedule kept, the reason
  recorded in the audit log for ``schedule list``;
- is enqueued as ``kind="aa"``, ``origin="schedule"``, below every file's priority;
- moves ``next_at`` to the first period boundary after now: periods missed while nothing
  ran are skipped, not made up in a burst.

Two schedulers on one database (``hairline serve`` and ``hairline lab schedule run``)
never enqueue one period twice: each takes the period with a compare-and-set on
``next_at`` before it enqueues.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from sqlalchemy import Table, delete, func, select, update

from hairline.config import ExperimentConfig
from hairline.errors import ConfigError, HairlineError
from hairline.kit.jsonout import documented
from hairline.lab.files import load_experiment_file
from hairline.lab.queue import Clock, enqueue
from hairline.store.db import Store
from hairline.store.models import ACTIVE_PHASES, AaSchedule, AuditEntry, Experiment

__all__ = [
    "PERIODIC_PRIORITY",
    "DueRound",
    "Schedule",
    "Skip",
    "add_schedule",
    "enqueue_due",
    "list_schedules",
    "next_due",
    "remove_schedule",
    "run_due",
]

log = logging.getLogger(__name__)

# Below the lowest priority an experiment file may ask for (-1000): an A/A run only takes
# hosts that nothing a person asked for is waiting for.
PERIODIC_PRIORITY = -1001
# The audit log's actor for what the scheduler did; its target is _target(schedule id).
SCHEDULER = "scheduler"
_ENQUEUED = "aa.enqueue"
_SKIPPED = "aa.skip"

Loader = Callable[[Path], ExperimentConfig]


@documented
@dataclass(frozen=True)
class Schedule:
    """One schedule of periodic A/A runs as ``hairline lab schedule list`` shows it."""

    id: int
    experiment_file: str
    service: str
    team: str
    every_s: float
    """The period, in seconds."""
    next_at: float
    """When the next run is due, Unix seconds."""
    enabled: bool
    last_experiment_id: int | None
    last_phase: str | None
    """The last A/A run's phase (null: none yet, or it is gone)."""
    error: str | None = None
    """Why the last due period was skipped (its file became invalid); null once a run was
    enqueued since."""
    error_at: float | None = None
    """When it was skipped, Unix seconds."""


@dataclass(frozen=True)
class Skip:
    schedule_id: int
    experiment_file: str
    reason: str


@dataclass(frozen=True)
class DueRound:
    """One look at the schedules: the A/A runs enqueued, the periods skipped."""

    enqueued: list[int]
    skipped: list[Skip]


def next_due(next_at: float, every_s: float, now: float) -> float:
    """The first period boundary after ``now`` (``next_at`` itself if still ahead)."""
    if next_at > now:
        return next_at
    return next_at + (math.floor((now - next_at) / every_s) + 1) * every_s


def _target(schedule_id: int) -> str:
    return f"aa_schedule {schedule_id}"


def _every_s(config: ExperimentConfig, path: Path) -> float:
    every_s = config.service.aa.every_s
    if every_s is None:
        raise ConfigError(
            f"{path}: the service {config.service.name!r} has no [aa] every",
            hint='add to its service file: [aa] every = "2h" (m, h or d; at least 1m)',
        )
    return every_s


def add_schedule(
    store: Store, path: Path, *, clock: Clock = time.time, load: Loader = load_experiment_file
) -> Schedule:
    """Schedule the A/A runs of the experiment file at ``path`` (its service's ``[aa]
    every``); the first is due at once. Adding a scheduled file again takes its period
    from the file anew."""
    resolved = path.resolve()
    config = load(resolved)
    every_s = _every_s(config, resolved)
    now = clock()
    with store.transaction() as session:
        row = session.scalar(select(AaSchedule).where(AaSchedule.experiment_file == str(resolved)))
        if row is None:
            row = AaSchedule(experiment_file=str(resolved), next_at=now, created_at=now)
            session.add(row)
        row.service = config.service.name
        row.team = config.team
        row.every_s = every_s
        row.enabled = True
        row.next_at = min(row.next_at, now + every_s)
        session.flush()
        session.add(AuditEntry(at=now, actor="cli", action="aa.schedule.add",
                               target=_target(row.id), detail=str(resolved)))  # fmt: skip
        schedule_id = row.id
    return next(s for s in list_schedules(store) if s.id == schedule_id)


def remove_schedule(store: Store, path: Path, *, clock: Clock = time.time) -> None:
    """Stop the A/A runs of the file at ``path``; runs already queued stay queued."""
    resolved = str(path.resolve())
    with store.transaction() as session:
        row = session.scalar(select(AaSchedule).where(AaSchedule.experiment_file == resolved))
        if row is None:
            raise HairlineError(
                f"{resolved} has no A/A schedule in {store.shown_url}",
                hint="`hairline lab schedule list` shows the scheduled files",
            )
        session.add(AuditEntry(at=clock(), actor="cli", action="aa.schedule.remove",
                               target=_target(row.id), detail=resolved))  # fmt: skip
        session.execute(delete(AaSchedule).where(AaSchedule.id == row.id))


_SCHEDULES = cast(Table, AaSchedule.__table__)
_S = _SCHEDULES.c
_EXPERIMENTS = cast(Table, Experiment.__table__)
_AUDIT = cast(Table, AuditEntry.__table__)
_A = _AUDIT.c


def list_schedules(store: Store) -> list[Schedule]:
    """Every schedule, soonest due first, with its last run's phase and its last error."""
    query = (
        select(_SCHEDULES, _EXPERIMENTS.c.phase)
        .select_from(_SCHEDULES.outerjoin(_EXPERIMENTS, _EXPERIMENTS.c.id == _S.last_experiment_id))
        .order_by(_S.next_at, _S.id)
    )
    with store.autocommit() as connection:
        rows = connection.execute(query).all()
        if not rows:
            return []
        # The scheduler's last word on each schedule (SQLite may give a removed
        # schedule's id to a new one: the created_at check below tells them apart).
        latest = (
            select(func.max(_A.id))
            .where(_A.actor == SCHEDULER, _A.action.in_((_ENQUEUED, _SKIPPED)),
                   _A.target.in_([_target(r.id) for r in rows]))
            .group_by(_A.target)
        )  # fmt: skip
        last_words = {
            entry.target: entry
            for entry in connection.execute(
                select(_A.target, _A.action, _A.detail, _A.at).where(_A.id.in_(latest))
            )
        }
    out = []
    for r in rows:
        word = last_words.get(_target(r.id))
        # A skip is an error until the next enqueue; older entries: a removed schedule's.
        failed = word if word is not None and word.action == _SKIPPED else None
        if failed is not None and failed.at < r.created_at:
            failed = None
        schedule = Schedule(
            id=r.id, experiment_file=r.experiment_file, service=r.service, team=r.team,
            every_s=r.every_s, next_at=r.next_at, enabled=r.enabled,
            last_experiment_id=r.last_experiment_id, last_phase=r.phase,
            error=None if failed is None else failed.detail,
            error_at=None if failed is None else failed.at,
        )  # fmt: skip
        out.append(schedule)
    return out


def enqueue_due(store: Store, *, clock: Clock = time.time) -> list[int]:
    """Enqueue every due periodic A/A run; the new experiments' ids."""
    return run_due(store, clock=clock).enqueued


def run_due(
    store: Store, *, clock: Clock = time.time, load: Loader = load_experiment_file
) -> DueRound:
    """Enqueue every due periodic A/A run; what was enqueued and what skipped, and why."""
    now = clock()
    enqueued: list[int] = []
    skipped: list[Skip] = []
    for schedule in list_schedules(store):
        if not schedule.enabled or schedule.next_at > now or schedule.last_phase in ACTIVE_PHASES:
            continue
        path = Path(schedule.experiment_file)
        try:
            config = load(path)
            every_s = _every_s(config, path)
        except (HairlineError, OSError) as err:
            reason = str(err)
            if _take_period(store, schedule, schedule.every_s, now):
                log.warning("A/A schedule %d (%s) skipped: %s", schedule.id, path, reason)
                _record(store, schedule.id, _SKIPPED, reason, now)
                skipped.append(Skip(schedule.id, schedule.experiment_file, reason))
            continue
        if not _take_period(store, schedule, every_s, now, config=config):
            continue  # another scheduler took this period
        experiment_id = enqueue(
            store, config, kind="aa", submitted_by=SCHEDULER, origin="schedule",
            priority=PERIODIC_PRIORITY, clock=clock,
        )  # fmt: skip
        with store.transaction() as session:
            session.execute(
                update(AaSchedule)
                .where(AaSchedule.id == schedule.id)
                .values(last_experiment_id=experiment_id)
            )
        _record(store, schedule.id, _ENQUEUED, f"experiment {experiment_id}", now)
        enqueued.append(experiment_id)
    return DueRound(enqueued=enqueued, skipped=skipped)


def _take_period(
    store: Store,
    schedule: Schedule,
    every_s: float,
    now: float,
    *,
    config: ExperimentConfig | None = None,
) -> bool:
    """Move the schedule past this period if no other scheduler has (compare-and-set on
    ``next_at``), with the file's period, service and team when it was read; taken?"""
    values: dict[str, object] = {
        "next_at": next_due(schedule.next_at, every_s, now),
        "every_s": every_s,
    }
    if config is not None:
        values |= {"service": config.service.name, "team": config.team}
    with store.autocommit() as connection:
        result = connection.execute(
            update(_SCHEDULES)
            .where(_S.id == schedule.id, _S.next_at == schedule.next_at)
            .values(**values)
        )
        return bool(result.rowcount == 1)


def _record(store: Store, schedule_id: int, action: str, detail: str, now: float) -> None:
    with store.transaction() as session:
        session.add(AuditEntry(at=now, actor=SCHEDULER, action=action,
                               target=_target(schedule_id), detail=detail))  # fmt: skip
