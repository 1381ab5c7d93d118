"""Regressions and their triage: the open ones (a deciding "regression" verdict with no
Triage row), acknowledging or ignoring one (a Triage row and an audit entry in one
transaction), and the audit trail of those decisions. An ignored regression no longer
fails its experiment's gate (web/queries.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, select

from hairline.errors import HairlineError
from hairline.store.db import Store
from hairline.store.models import AuditEntry, Experiment, Service, Triage, VerdictRow
from hairline.web.auth import Principal

__all__ = [
    "TRIAGE_STATES",
    "AuditLine",
    "RegressionRow",
    "audit_trail",
    "open_regression_counts",
    "regressions",
    "triage",
    "triage_target",
]

TRIAGE_STATES = ("acknowledged", "ignored")
_ACTION = "triage"
_E = Experiment


@dataclass(frozen=True)
class RegressionRow:
    experiment_id: int
    service: str
    team: str
    metric: str
    candidate: str
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None
    finished_at: float | None
    triage: str | None  # None: open
    triage_actor: str | None
    triage_note: str | None


def regressions(
    store: Store, teams: Collection[str] | None, *, triaged: bool = False, limit: int = 200
) -> list[RegressionRow]:
    """The newest ``limit`` deciding regressions: open ones only, or with ``triaged`` the
    acknowledged and ignored ones too."""
    query = _deciding_regressions(
        select(VerdictRow.experiment_id, Service.name, _E.team, VerdictRow.metric,
               VerdictRow.candidate, VerdictRow.relative_effect, VerdictRow.ci_low,
               VerdictRow.ci_high, _E.finished_at, Triage.state, Triage.actor, Triage.note),
        teams, triaged=triaged,
    )  # fmt: skip
    query = query.order_by(VerdictRow.experiment_id.desc(), VerdictRow.id).limit(limit)
    with store.autocommit() as connection:
        return [RegressionRow(*tuple(row)) for row in connection.execute(query).all()]


def open_regression_counts(store: Store, teams: Collection[str] | None) -> dict[str, int]:
    """Per service, its open regressions: the rows the regressions page lists."""
    query = _deciding_regressions(
        select(Service.name, func.count()), teams, triaged=False
    ).group_by(Service.name)
    with store.autocommit() as connection:
        return {name: int(count) for name, count in connection.execute(query).all()}


def _deciding_regressions(query: Any, teams: Collection[str] | None, *, triaged: bool) -> Any:
    """``query`` over the deciding regressions of finished experiments (with their
    experiment, service and triage joined): open ones only unless ``triaged``."""
    on = and_(
        Triage.experiment_id == VerdictRow.experiment_id,
        Triage.metric == VerdictRow.metric,
        Triage.candidate == VerdictRow.candidate,
    )
    query = (
        query.select_from(VerdictRow)
        .join(_E, _E.id == VerdictRow.experiment_id)
        .join(Service, Service.id == _E.service_id)
        .outerjoin(Triage, on)
        .where(VerdictRow.label == "regression", VerdictRow.deciding, _E.phase == "done")
        # A bisection's steps are its means, not findings: its result names the culprit
        # (an A/A-like first step's chance flag once showed here as an open regression).
        .where(_E.origin != "bisect")
    )
    if teams is not None:
        query = query.where(_E.team.in_(tuple(teams)))
    if not triaged:
        query = query.where(Triage.id.is_(None))
    return query


def triage_target(experiment_id: int, metric: str, candidate: str) -> str:
    """How the audit log names one regression."""
    return f"experiment {experiment_id} {metric} of {candidate}"


def triage(
    store: Store,
    who: Principal,
    *,
    experiment_id: int,
    metric: str,
    candidate: str,
    state: str,
    note: str = "",
    clock: Callable[[], float] = time.time,
) -> None:
    """Acknowledge or ignore one deciding regression of an experiment ``who`` may see; a
    second decision replaces the first (both stay in the audit log)."""
    if state not in TRIAGE_STATES:
        raise HairlineError(
            f"state {state!r} is not a triage state",
            hint=f"send state = {' or '.join(TRIAGE_STATES)}",
        )
    if not note.strip():
        raise HairlineError(
            f"to mark a regression {state}, say why",
            hint="write the reason in the note (it is kept in the audit log with your name)",
        )
    now = clock()
    with store.transaction() as session:
        team = session.scalar(select(_E.team).where(_E.id == experiment_id))
        found = session.scalar(
            select(VerdictRow.id).where(
                VerdictRow.experiment_id == experiment_id,
                VerdictRow.metric == metric,
                VerdictRow.candidate == candidate,
                VerdictRow.label == "regression",
                VerdictRow.deciding,
            )
        )
        if team is None or not who.sees(team) or found is None:
            raise HairlineError(
                f"experiment {experiment_id} has no regression of {metric} for arm "
                f"{candidate} that token {who.name!r} may see",
                hint="pick one from the regressions page (/regressions)",
            )
        row = session.scalar(
            select(Triage).where(
                Triage.experiment_id == experiment_id,
                Triage.metric == metric,
                Triage.candidate == candidate,
            )
        )
        if row is None:
            session.add(Triage(experiment_id=experiment_id, metric=metric, candidate=candidate,
                               state=state, actor=who.name, note=note, at=now))  # fmt: skip
        else:
            row.state, row.actor, row.note, row.at = state, who.name, note, now
        session.add(
            AuditEntry(at=now, actor=who.name, action=f"{_ACTION}.{state}",
                       target=triage_target(experiment_id, metric, candidate), detail=note)
        )  # fmt: skip


@dataclass(frozen=True)
class AuditLine:
    at: float
    actor: str
    action: str
    target: str
    detail: str


def audit_trail(store: Store, teams: Collection[str] | None, *, limit: int = 50) -> list[AuditLine]:
    """The newest triage decisions on experiments of ``teams`` (every team: None)."""
    with store.autocommit() as connection:
        rows = connection.execute(
            select(AuditEntry.at, AuditEntry.actor, AuditEntry.action, AuditEntry.target,
                   AuditEntry.detail)
            .where(AuditEntry.action.like(f"{_ACTION}.%"))
            .order_by(AuditEntry.id.desc())
            .limit(limit * 4 if teams is not None else limit)
        ).all()  # fmt: skip
        ids = {_experiment_of(r.target) for r in rows} - {None}
        team_of = dict(connection.execute(select(_E.id, _E.team).where(_E.id.in_(ids))).all())
    lines = [
        AuditLine(row.at, row.actor, row.action, row.target, row.detail)
        for row in rows
        if teams is None or team_of.get(_experiment_of(row.target) or 0, "") in teams
    ]
    return lines[:limit]


def _experiment_of(target: str) -> int | None:
    words = target.split()
    if len(words) >= 2 and words[0] == "experiment" and words[1].isdigit():
        return int(words[1])
    return None
