"""What the dashboard and the API read: experiments listed a page at a time, an
experiment's gate. Each page is one indexed query for its rows and one for their counts,
whatever the number of experiments (keyset paging on id, newest first; no OFFSET)."""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, exists, func, or_, select

from hairline.errors import HairlineError
from hairline.report.scorecard import JudgedVerdict
from hairline.store.db import Store
from hairline.store.models import (
    ACTIVE_PHASES,
    PHASES,
    TERMINAL_PHASES,
    AuditEntry,
    Experiment,
    Service,
    Triage,
    Trial,
    VerdictRow,
)

__all__ = [
    "GATE_ANSWERS",
    "GATE_POLICIES",
    "VERDICTS",
    "ExperimentFilter",
    "ExperimentSummary",
    "Gate",
    "GateInconclusive",
    "GateRegression",
    "Page",
    "TrialCounts",
    "experiment_team",
    "gate_of",
    "list_experiments",
    "service_teams",
    "set_gate_policy",
    "trial_counts",
]

# The gate's answers; the list filters by the same words.
GATE_ANSWERS = ("pass", "fail", "pending", "error")
VERDICTS = GATE_ANSWERS
MAX_PAGE = 500


@dataclass(frozen=True)
class ExperimentFilter:
    service: str | None = None
    team: str | None = None
    phase: str | None = None  # a phase, or "active" | "ended"
    verdict: str | None = None  # one of GATE_ANSWERS
    kind: str | None = None  # "ab" | "aa"
    since: float | None = None  # created_at >= since (Unix s)
    until: float | None = None  # created_at < until

    def check(self) -> None:
        """Raise a HairlineError naming the filter that cannot match anything."""
        if self.phase is not None and self.phase not in (*PHASES, "active", "ended"):
            raise HairlineError(
                f"phase {self.phase!r} is not a phase",
                hint=f"use one of {', '.join((*PHASES, 'active', 'ended'))}",
            )
        if self.verdict is not None and self.verdict not in GATE_ANSWERS:
            raise HairlineError(
                f"verdict {self.verdict!r} is not a verdict",
                hint=f"use one of {', '.join(GATE_ANSWERS)}",
            )
        if self.kind is not None and self.kind not in ("ab", "aa"):
            raise HairlineError(f"kind {self.kind!r} is not a kind", hint="use ab or aa")


@dataclass(frozen=True)
class ExperimentSummary:
    id: int
    service: str
    team: str
    kind: str
    phase: str
    progress: str
    failure: str | None
    verdict: str  # the gate's answer
    regressions: int  # deciding regressions not ignored
    trials_done: int
    trials: int
    created_at: float
    finished_at: float | None
    submitted_by: str
    origin: str

    @property
    def active(self) -> bool:
        return self.phase in ACTIVE_PHASES


@dataclass(frozen=True)
class Page:
    items: tuple[ExperimentSummary, ...]
    next_before: int | None  # pass as ``before`` for the next (older) page


_E = Experiment
# A deciding regression nobody chose to ignore: counted as the experiment's regressions.
_OPEN_REGRESSION = and_(
    VerdictRow.experiment_id == _E.id,
    VerdictRow.label == "regression",
    VerdictRow.deciding,
    ~exists().where(
        Triage.experiment_id == VerdictRow.experiment_id,
        Triage.metric == VerdictRow.metric,
        Triage.candidate == VerdictRow.candidate,
        Triage.state == "ignored",
    ),
)
# What fails a gate (the list's filter and verdict; gate_of says the same in Python): an
# open regression, or an inconclusive deciding verdict where the service's policy is
# "fail". The query joins Service.
_BLOCKING = or_(
    _OPEN_REGRESSION,
    and_(
        VerdictRow.experiment_id == _E.id,
        VerdictRow.label == "inconclusive",
        VerdictRow.deciding,
        Service.gate_inconclusive != "pass",
    ),
)


def _verdict_clause(verdict: str) -> Any:
    failing = exists().where(_BLOCKING)
    if verdict == "pending":
        return _E.phase.in_(ACTIVE_PHASES)
    if verdict == "error":
        return _E.phase.in_(("failed", "cancelled"))
    if verdict == "fail":
        return and_(_E.phase == "done", failing)
    return and_(_E.phase == "done", ~failing)


def _filtered(query: Any, teams: Collection[str] | None, f: ExperimentFilter) -> Any:
    if teams is not None:
        query = query.where(_E.team.in_(tuple(teams)))
    if f.team is not None:
        query = query.where(_E.team == f.team)
    if f.service is not None:
        query = query.where(Service.name == f.service)
    if f.phase == "active":
        query = query.where(_E.phase.in_(ACTIVE_PHASES))
    elif f.phase == "ended":
        query = query.where(_E.phase.in_(TERMINAL_PHASES))
    elif f.phase is not None:
        query = query.where(_E.phase == f.phase)
    if f.kind is not None:
        query = query.where(_E.kind == f.kind)
    if f.since is not None:
        query = query.where(_E.created_at >= f.since)
    if f.until is not None:
        query = query.where(_E.created_at < f.until)
    if f.verdict is not None:
        query = query.where(_verdict_clause(f.verdict))
    return query


def _answer(phase: str, regressions: int) -> str:
    if phase in ACTIVE_PHASES:
        return "pending"
    if phase != "done":
        return "error"
    return "fail" if regressions else "pass"


def list_experiments(
    store: Store,
    *,
    teams: Collection[str] | None,
    filters: ExperimentFilter = ExperimentFilter(),
    before: int | None = None,
    limit: int = 50,
) -> Page:
    """A page of experiments, newest first: those with id < ``before`` that ``filters``
    keep, of ``teams`` (None: every team). ``next_before`` is None on the last page."""
    filters.check()
    limit = max(1, min(limit, MAX_PAGE))
    query = (
        select(_E.id, Service.name, _E.team, _E.kind, _E.phase, _E.progress, _E.failure,
               _E.created_at, _E.finished_at, _E.submitted_by, _E.origin)
        .join(Service, Service.id == _E.service_id)
    )  # fmt: skip
    query = _filtered(query, teams, filters)
    if before is not None:
        query = query.where(_E.id < before)
    query = query.order_by(_E.id.desc()).limit(limit + 1)
    with store.autocommit() as connection:
        rows = connection.execute(query).all()[: limit + 1]
        more = len(rows) > limit
        rows = rows[:limit]
        ids = [r.id for r in rows]
        counts = _counts(connection, ids)
    items = tuple(
        ExperimentSummary(
            id=r.id, service=r.name, team=r.team, kind=r.kind, phase=r.phase,
            progress=r.progress, failure=r.failure,
            verdict=_answer(r.phase, counts["blocking"].get(r.id, 0)),
            regressions=counts["regressions"].get(r.id, 0),
            trials_done=counts["done"].get(r.id, 0), trials=counts["trials"].get(r.id, 0),
            created_at=r.created_at, finished_at=r.finished_at,
            submitted_by=r.submitted_by, origin=r.origin,
        )
        for r in rows
    )  # fmt: skip
    return Page(items=items, next_before=ids[-1] if more and ids else None)


def _counts(connection: Any, ids: list[int]) -> dict[str, dict[int, int]]:
    """Trials (all, done) and open regressions of the experiments ``ids``."""
    if not ids:
        return {"trials": {}, "done": {}, "regressions": {}, "blocking": {}}
    trials: dict[int, int] = {}
    done: dict[int, int] = {}
    for experiment_id, state, count in connection.execute(
        select(Trial.experiment_id, Trial.state, func.count())
        .where(Trial.experiment_id.in_(ids))
        .group_by(Trial.experiment_id, Trial.state)
    ):
        trials[experiment_id] = trials.get(experiment_id, 0) + count
        if state == "done":
            done[experiment_id] = count
    regressions = dict(
        connection.execute(
            select(VerdictRow.experiment_id, func.count())
            .select_from(VerdictRow)
            .join(_E, _E.id == VerdictRow.experiment_id)
            .where(VerdictRow.experiment_id.in_(ids), _OPEN_REGRESSION)
            .group_by(VerdictRow.experiment_id)
        ).all()
    )
    blocking = dict(
        connection.execute(
            select(VerdictRow.experiment_id, func.count())
            .select_from(VerdictRow)
            .join(_E, _E.id == VerdictRow.experiment_id)
            .join(Service, Service.id == _E.service_id)
            .where(VerdictRow.experiment_id.in_(ids), _BLOCKING)
            .group_by(VerdictRow.experiment_id)
        ).all()
    )
    return {"trials": trials, "done": done, "regressions": regressions, "blocking": blocking}


@dataclass(frozen=True)
class TrialCounts:
    """An experiment's trials by state: what its status line says, in the same terms as
    the list's ``done/planned`` column and the report's "6 of 7 trials"."""

    planned: int
    done: int  # measured and analysed
    left_out: int  # excluded: every attempt's batch was spoiled
    not_needed: int  # skipped: a sequential design settled before them
    running: int

    @property
    def shown(self) -> int:
        """The "of N" of "D of N trials": those planned, less those a sequential design
        found it did not need (the report counts the trials it ran the same way)."""
        return self.planned - self.not_needed


def trial_counts(store: Store, experiment_id: int) -> TrialCounts:
    with store.autocommit() as connection:
        by_state = dict(
            connection.execute(
                select(Trial.state, func.count())
                .where(Trial.experiment_id == experiment_id)
                .group_by(Trial.state)
            ).all()
        )
    return TrialCounts(
        planned=sum(by_state.values()), done=by_state.get("done", 0),
        left_out=by_state.get("excluded", 0), not_needed=by_state.get("skipped", 0),
        running=by_state.get("running", 0),
    )  # fmt: skip


@dataclass(frozen=True)
class GateRegression:
    metric: str
    candidate: str
    baseline: str | None
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None
    triage: str | None  # None (open) | "acknowledged" | "ignored"


@dataclass(frozen=True)
class GateInconclusive:
    """A deciding metric whose interval neither shows nor rules out a regression."""

    metric: str
    candidate: str
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Gate:
    """What a release pipeline blocks on: ``answer`` is pass, fail, pending or error.

    ``deciding`` counts the deciding verdicts; ``inconclusive`` are those that settled
    nothing, which fail the gate unless the service's policy (``inconclusive_passes``,
    set by an admin) lets them pass. ``judged``: every deciding verdict, for the score
    (report/scorecard.py)."""

    experiment_id: int
    answer: str
    phase: str
    progress: str
    reason: str
    regressions: tuple[GateRegression, ...]
    inconclusive: tuple[GateInconclusive, ...] = ()
    deciding: int = 0
    inconclusive_passes: bool = False
    judged: tuple[JudgedVerdict, ...] = ()


GATE_POLICIES = ("fail", "pass")


def service_teams(store: Store, service: str) -> frozenset[str]:
    """The teams that have experiments of ``service`` (empty for a name the lab has only
    seen in events: a downstream, a host)."""
    with store.autocommit() as connection:
        rows = connection.scalars(
            select(_E.team).distinct().join(Service, Service.id == _E.service_id)
            .where(Service.name == service)
        ).all()  # fmt: skip
    return frozenset(rows)


def experiment_team(store: Store, experiment_id: int) -> str | None:
    """The experiment's team; None when there is no such experiment."""
    with store.autocommit() as connection:
        team: str | None = connection.scalar(select(_E.team).where(_E.id == experiment_id))
        return team


def set_gate_policy(store: Store, service: str, inconclusive: str, *, actor: str) -> None:
    """What an inconclusive deciding verdict does to ``service``'s gate: "fail" (the
    default) or "pass"; audited."""
    if inconclusive not in GATE_POLICIES:
        raise HairlineError(
            f"{inconclusive!r} is not a gate policy", hint="use --inconclusive fail or pass"
        )
    with store.transaction() as session:
        row = session.scalar(select(Service).where(Service.name == service))
        if row is None:
            raise HairlineError(
                f"no service {service!r} in {store.shown_url}",
                hint="a service exists once an experiment of it was submitted",
            )
        row.gate_inconclusive = inconclusive
        session.add(AuditEntry(at=time.time(), actor=actor, action="gate.policy",
                               target=service, detail=f"inconclusive: {inconclusive}"))  # fmt: skip


def gate_of(store: Store, experiment_id: int) -> Gate:
    """The gate's answer: pending while the experiment is active, error when it failed or
    was cancelled, fail when a deciding regression is not triaged "ignored" or (unless the
    service's policy lets it pass) a deciding verdict is inconclusive, else pass."""
    with store.autocommit() as connection:
        row = connection.execute(
            select(_E.phase, _E.progress, _E.failure, Service.gate_inconclusive)
            .join(Service, Service.id == _E.service_id)
            .where(_E.id == experiment_id)
        ).first()
        if row is None:
            raise HairlineError(
                f"no experiment {experiment_id} in {store.shown_url}",
                hint="`hairline status` lists the experiments",
            )
        found = connection.execute(
            select(VerdictRow.label, VerdictRow.metric, VerdictRow.candidate,
                   VerdictRow.baseline, VerdictRow.relative_effect, VerdictRow.ci_low,
                   VerdictRow.ci_high, Triage.state, VerdictRow.direction)
            .outerjoin(Triage, and_(Triage.experiment_id == VerdictRow.experiment_id,
                                    Triage.metric == VerdictRow.metric,
                                    Triage.candidate == VerdictRow.candidate))
            .where(VerdictRow.experiment_id == experiment_id, VerdictRow.deciding)
            .order_by(VerdictRow.id)
        ).all()  # fmt: skip
    regressions = tuple(GateRegression(*r[1:8]) for r in found if r.label == "regression")
    inconclusive = tuple(
        GateInconclusive(r.metric, r.candidate, r.relative_effect, r.ci_low, r.ci_high)
        for r in found
        if r.label == "inconclusive"
    )
    passes = row.gate_inconclusive == "pass"
    failing = [r for r in regressions if r.triage != "ignored"]
    blocking = len(failing) + (0 if passes else len(inconclusive))
    answer = _answer(row.phase, blocking)
    if answer == "pending":
        reason = f"the experiment is {row.phase}: {row.progress}"
    elif answer == "error":
        reason = f"the experiment {row.phase}" + (f": {row.failure}" if row.failure else "")
    else:
        reason = _counted(len(found), regressions, failing, inconclusive, passes=passes)
    judged = tuple(JudgedVerdict(r.metric, r.candidate, r.label, r.direction,
                                 ignored=r.state == "ignored") for r in found)  # fmt: skip
    return Gate(experiment_id, answer, row.phase, row.progress, reason, regressions,
                inconclusive, len(found), passes, judged)  # fmt: skip


def _counted(
    deciding: int,
    regressions: tuple[GateRegression, ...],
    failing: list[GateRegression],
    inconclusive: tuple[GateInconclusive, ...],
    *,
    passes: bool,
) -> str:
    """The gate's reason, naming what it counted: "fail: 1 regression (cpu of B), 2
    inconclusive (...), of 10 deciding metrics"."""
    parts = []
    if failing:
        parts.append(f"{len(failing)} regression(s): "
                     + ", ".join(f"{r.metric} of {r.candidate}" for r in failing))  # fmt: skip
    ignored = len(regressions) - len(failing)
    if ignored:
        parts.append(f"{ignored} regression(s) ignored by triage")
    if inconclusive:
        names = ", ".join(f"{r.metric} of {r.candidate}" for r in inconclusive)
        rule = "passed by the service's gate policy" if passes else "which do not pass"
        parts.append(f"{len(inconclusive)} inconclusive ({names}), {rule}")
    if not failing and (passes or not inconclusive):
        parts.insert(0, "no regression")
    return "; ".join(parts) + f" (of {deciding} deciding verdict(s))"


def gate_junit(store: Store, experiment_id: int) -> str:
    """The experiment's JUnit XML judged as its gate judges it: the service's policy on
    inconclusive verdicts, regressions triaged "ignored" skipped (report/junit.py)."""
    from hairline.report.experiment import load_report
    from hairline.report.junit import render_junit

    gate = gate_of(store, experiment_id)
    ignored = {(r.metric, r.candidate) for r in gate.regressions if r.triage == "ignored"}
    return render_junit(
        load_report(store, experiment_id),
        inconclusive_passes=gate.inconclusive_passes,
        ignored=ignored,
    )
