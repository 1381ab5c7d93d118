"""What the dashboard's pages read beyond the experiment list (web/queries.py): an
experiment's hosts per batch and its build logs, a service's metric history, and the A/A
runs that the A/A health page draws. Each read is a few indexed queries
bounded by a limit, whatever the number of experiments."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import and_, case, func, select

from hairline.config.policy import parse_threshold
from hairline.errors import HairlineError
from hairline.hosts.similar import REPORTED_FACTS, mismatches
from hairline.store.db import Store
from hairline.store.models import Arm, Experiment, Host, Run, Service, VerdictRow
from hairline.web.health import AaRun

__all__ = [
    "BatchHosts",
    "BuildLog",
    "HistoryPoint",
    "ServiceOverview",
    "aa_runs",
    "arm_build_logs",
    "experiment_hosts",
    "metric_history",
    "relative_threshold",
    "service_names",
    "service_overview",
]

_E = Experiment


@dataclass(frozen=True)
class BatchHosts:
    """The hosts of each arm in one or more batches that ran on the same hosts."""

    batches: tuple[tuple[int, int], ...]  # (trial, batch)
    arms: tuple[str, ...]
    hosts: tuple[str, ...]  # each arm's host name
    facts: tuple[tuple[str, tuple[str, ...]], ...]  # fact -> each arm's value
    differ: frozenset[str]  # the facts on which the arms' hosts differ


def _teams(query: Any, teams: Collection[str] | None) -> Any:
    return query if teams is None else query.where(_E.team.in_(tuple(teams)))


def experiment_hosts(store: Store, experiment_id: int) -> tuple[BatchHosts, ...]:
    """Each arm's host facts side by side per batch (Run.facts, as recorded when the arm
    started); batches on the same hosts with the same facts are shown once."""
    with store.autocommit() as connection:
        rows = connection.execute(
            select(Run.trial, Run.batch, Run.arm, Host.name, Run.facts)
            .join(Host, Host.id == Run.host_id)
            .where(Run.experiment_id == experiment_id)
            .order_by(Run.trial, Run.batch, Run.id)
        ).all()
    by_batch: dict[tuple[int, int], dict[str, tuple[str, dict[str, str]]]] = {}
    for trial, batch, arm, host, recorded in rows:
        try:
            parsed = {str(k): str(v) for k, v in json.loads(recorded).items()}
        except (ValueError, AttributeError):
            parsed = {}
        # A replaced host ran the batch again: the last one recorded is the one measured.
        by_batch.setdefault((trial, batch), {})[arm] = (host, parsed)
    groups: dict[tuple[object, ...], list[tuple[int, int]]] = {}
    shown: dict[tuple[object, ...], BatchHosts] = {}
    for key, arms in by_batch.items():
        names = tuple(sorted(arms))
        facts = [arms[a][1] for a in names]
        listed = [f for f in REPORTED_FACTS if any(f in h for h in facts)]
        listed += sorted({k for h in facts for k in h} - set(listed))
        table = tuple((f, tuple(h.get(f, "") for h in facts)) for f in listed)
        hosts = tuple(arms[a][0] for a in names)
        signature = (names, hosts, table)
        groups.setdefault(signature, []).append(key)
        shown.setdefault(
            signature,
            BatchHosts(
                batches=(),
                arms=names,
                hosts=hosts,
                facts=table,
                differ=frozenset(mismatches(facts, facts=listed)),
            ),
        )
    return tuple(
        BatchHosts(
            batches=tuple(groups[s]), arms=b.arms, hosts=b.hosts, facts=b.facts, differ=b.differ
        )
        for s, b in shown.items()
    )


@dataclass(frozen=True)
class BuildLog:
    """An arm's recorded build log: the build's, or a failed build's kept in the
    experiment's folder (lab/processor.py)."""

    path: Path
    failed: bool  # the build failed: the arm has no build


def arm_build_logs(store: Store, experiment_id: int) -> dict[str, BuildLog]:
    """Each built (or failed) arm's recorded build log: the only files the log route
    serves."""
    with store.autocommit() as connection:
        rows = connection.execute(
            select(Arm.name, Arm.build_log, Arm.build_key)
            .where(Arm.experiment_id == experiment_id, Arm.build_log.is_not(None))
            .order_by(Arm.position)
        ).all()
    return {name: BuildLog(Path(log), failed=key is None) for name, log, key in rows if log}


@dataclass(frozen=True)
class HistoryPoint:
    """One A/B experiment's deciding verdict on a metric."""

    experiment_id: int
    at: float
    candidate: str
    label: str
    relative_effect: float | None
    ci_low: float | None
    ci_high: float | None
    threshold_rel: float | None  # the relative threshold applied; None when absolute
    direction: str
    source: str = ""  # the candidate's source as built: "git 1a2b3c4d (main)", "path ..."

    @property
    def commit(self) -> str | None:
        """The candidate's commit (abbreviated as the build recorded it), when it was a
        git revision."""
        kind, _, rest = self.source.partition(" ")
        if kind != "git" or not rest:
            return None
        return rest.split(" ", 1)[0]


def relative_threshold(stored: str) -> float | None:
    """A verdict row's threshold ("0.01 rel" relative, "5" absolute) as a fraction, or
    None for an absolute one (its band has no place on a relative axis)."""
    value, _, kind = stored.partition(" ")
    if kind != "rel":
        return None
    try:
        threshold = parse_threshold(value)
    except HairlineError:
        return None
    return threshold.value


def service_names(store: Store, teams: Collection[str] | None) -> list[str]:
    """The services with an experiment the principal may see."""
    query = select(Service.name).where(
        select(_E.id).where(_E.service_id == Service.id).exists()
        if teams is None
        else select(_E.id).where(_E.service_id == Service.id, _E.team.in_(tuple(teams))).exists()
    )
    with store.autocommit() as connection:
        return sorted(connection.scalars(query).all())


@dataclass(frozen=True)
class ServiceOverview:
    """One row of /services: a service's experiments the principal may see."""

    name: str
    experiments: int
    aa_runs: int  # finished A/A runs: its model choice's history
    last_id: int  # the newest experiment
    last_phase: str
    last_at: float  # when the newest was created (Unix s)
    open_regressions: int  # as the regressions page counts them


def service_overview(
    store: Store, teams: Collection[str] | None, open_regressions: dict[str, int]
) -> list[ServiceOverview]:
    """Each service with an experiment the principal may see, by name: how many, its
    newest, its finished A/A runs; ``open_regressions`` per service from web/triage.py."""
    aa_done = func.sum(case((and_(_E.kind == "aa", _E.phase == "done"), 1), else_=0))
    query = _teams(
        select(Service.name, func.count(_E.id), aa_done, func.max(_E.id))
        .join(_E, _E.service_id == Service.id)
        .group_by(Service.name),
        teams,
    )
    with store.autocommit() as connection:
        counts = connection.execute(query).all()
        newest = {
            row.id: row
            for row in connection.execute(
                select(_E.id, _E.phase, _E.created_at).where(
                    _E.id.in_(tuple(last for *_, last in counts))
                )
            ).all()
        }
    return [
        ServiceOverview(
            name=name, experiments=int(n), aa_runs=int(aa or 0), last_id=last,
            last_phase=newest[last].phase, last_at=newest[last].created_at,
            open_regressions=open_regressions.get(name, 0),
        )
        for name, n, aa, last in sorted(counts)
    ]  # fmt: skip


def _done_ids(service: str | None, kind: str, teams: Collection[str] | None, limit: int) -> Any:
    """The newest ``limit`` finished experiments of a kind (of a service), as a subquery."""
    query = select(_E.id).where(_E.kind == kind, _E.phase == "done")
    if service is not None:
        query = query.join(Service, Service.id == _E.service_id).where(Service.name == service)
    return _teams(query, teams).order_by(_E.id.desc()).limit(limit).subquery()


def metric_history(
    store: Store, service: str, teams: Collection[str] | None, *, limit: int = 100
) -> dict[str, tuple[HistoryPoint, ...]]:
    """Each metric's deciding verdicts over the newest ``limit`` finished A/B experiments
    of ``service``, oldest first (a history reads left to right)."""
    ids = _done_ids(service, "ab", teams, limit)
    with store.autocommit() as connection:
        rows = connection.execute(
            select(VerdictRow.experiment_id, func.coalesce(_E.finished_at, _E.created_at),
                   VerdictRow.metric, VerdictRow.candidate, VerdictRow.label,
                   VerdictRow.relative_effect, VerdictRow.ci_low, VerdictRow.ci_high,
                   VerdictRow.threshold, VerdictRow.direction, Arm.source)
            .join(_E, _E.id == VerdictRow.experiment_id)
            .outerjoin(Arm, (Arm.experiment_id == VerdictRow.experiment_id)
                       & (Arm.name == VerdictRow.candidate))
            .where(VerdictRow.experiment_id.in_(select(ids.c.id)), VerdictRow.deciding)
            .order_by(VerdictRow.experiment_id, VerdictRow.id)
        ).all()  # fmt: skip
    history: dict[str, list[HistoryPoint]] = {}
    for eid, at, metric, cand, label, rel, lo, hi, threshold, direction, source in rows:
        history.setdefault(metric, []).append(
            HistoryPoint(eid, at, cand, label, rel, lo, hi, relative_threshold(threshold),
                         direction, source or "")
        )  # fmt: skip
    return {metric: tuple(points) for metric, points in sorted(history.items())}


def aa_runs(
    store: Store, teams: Collection[str] | None, *, limit: int = 500
) -> tuple[dict[tuple[str, str], list[AaRun]], dict[str, float]]:
    """The newest ``limit`` finished A/A experiments' deciding verdicts by (service,
    metric), oldest first, and each service's alpha (from its newest A/A's file)."""
    ids = _done_ids(None, "aa", teams, limit)
    with store.autocommit() as connection:
        rows = connection.execute(
            select(VerdictRow.experiment_id, Service.name, VerdictRow.metric, VerdictRow.label,
                   func.coalesce(_E.finished_at, _E.created_at))
            .join(_E, _E.id == VerdictRow.experiment_id)
            .join(Service, Service.id == _E.service_id)
            .where(VerdictRow.experiment_id.in_(select(ids.c.id)), VerdictRow.deciding)
            .order_by(VerdictRow.experiment_id, VerdictRow.id)
        ).all()  # fmt: skip
        newest = {}
        for eid, service, *_ in rows:
            newest[service] = eid
        specs = dict(
            connection.execute(
                select(_E.id, _E.spec).where(_E.id.in_(tuple(newest.values())))
            ).all()
        )
    # Several deciding comparisons (three arms) make one run: a false positive if any is.
    runs: dict[tuple[str, str], dict[int, AaRun]] = {}
    for eid, service, metric, label, at in rows:
        found = runs.setdefault((service, metric), {})
        if eid not in found or found[eid].label in ("no change", "inconclusive"):
            found[eid] = AaRun(experiment_id=eid, at=at, label=label)
    alphas = {service: _alpha(specs.get(eid, "")) for service, eid in newest.items()}
    return {key: list(found.values()) for key, found in sorted(runs.items())}, alphas


def _alpha(spec: str) -> float:
    try:
        alpha = json.loads(spec)["analysis"]["alpha"]
    except (ValueError, KeyError, TypeError):
        return 0.05
    return float(alpha) if isinstance(alpha, int | float) and 0 < alpha < 1 else 0.05
