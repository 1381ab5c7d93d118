"""The concurrency guard: what else ran while an experiment's trials did, on its hosts or
against its downstream services (ServiceLab section 6.2.4: another test or deployment at the
same time is the top cause of false positives).

Other experiments are found from their runs (which arm ran on which host from when to
when), so every experiment is visible to the others with nothing to record; deployments and
maintenance are events (lab/events.py). :func:`find_overlaps` is pure, over rows;
:func:`overlaps` reads the rows in one transaction of three statements.

Times are half-open: a run that stopped at t and one that started at t did not overlap. An
event without an end is a point in time, inside a run when ``start <= t < stop``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError
from sqlalchemy import and_, func, or_, select

from hairline.config.isolation import IsolationConfig
from hairline.lab.events import RecordedEvent, recorded_event
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, LabEvent, Run, Service

__all__ = ["Activity", "Overlap", "find_overlaps", "overlaps", "spec_downstreams"]


@dataclass(frozen=True)
class Overlap:
    kind: str  # "experiment" | "deploy" | "maintenance" | "other"
    what: str  # "experiment 12 (svc)" or the event's service
    reason: str  # "same host w2" | "same machine m1" | "same downstream 127.0.0.1:5432"
    started_at: datetime
    ended_at: datetime | None
    # Beyond interfaces.md: our trials (numbered from 1) it overlapped, and an event's note.
    trials: tuple[int, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class Activity:
    """One arm of one batch on one host, from start to stop (now while it runs)."""

    experiment_id: int
    service: str
    trial: int  # from 0, as stored
    host: str
    machine: str
    start_s: float
    stop_s: float


def _when(at_s: float) -> datetime:
    return datetime.fromtimestamp(at_s, tz=UTC)


def _meets(start_s: float, stop_s: float, other_start_s: float, other_stop_s: float) -> bool:
    """Whether half-open [start, stop) and [other_start, other_stop) share a moment."""
    return start_s < other_stop_s and other_start_s < stop_s


def _event_meets(run: Activity, event: RecordedEvent) -> bool:
    # No end, or an end at its start: a point in time, not an empty interval.
    if event.ended_at is None or event.ended_at <= event.started_at:
        return run.start_s <= event.started_at < run.stop_s
    return _meets(run.start_s, run.stop_s, event.started_at, event.ended_at)


def _host_reason(run: Activity, other_host: str, other_machine: str) -> str | None:
    """Why another's run on ``other_host`` may have disturbed ``run``: the same host, or
    another host of the same machine (local CPU sets share caches and memory bandwidth)."""
    if other_host == run.host:
        return f"same host {run.host}"
    if other_machine == run.machine:
        return f"same machine {run.machine}"
    return None


class _Found:
    """Overlaps gathered by (kind, what, reason): their span and our trials."""

    def __init__(self) -> None:
        self.spans: dict[tuple[str, str, str, str], tuple[float, float | None, set[int]]] = {}

    def add(
        self, key: tuple[str, str, str, str], start_s: float, stop_s: float | None, trial: int
    ) -> None:
        old = self.spans.get(key)
        if old is None:
            self.spans[key] = (start_s, stop_s, {trial})
            return
        lo, hi, trials = old
        trials.add(trial)
        ends = [e for e in (hi, stop_s) if e is not None]
        self.spans[key] = (min(lo, start_s), max(ends) if ends else None, trials)

    def result(self) -> list[Overlap]:
        found = [
            Overlap(kind=kind, what=what, reason=reason, started_at=_when(lo),
                    ended_at=None if hi is None else _when(hi),
                    trials=tuple(sorted(t + 1 for t in trials)), note=note)
            for (kind, what, reason, note), (lo, hi, trials) in self.spans.items()
        ]  # fmt: skip
        return sorted(found, key=lambda o: (o.started_at, o.kind, o.what, o.reason))


def find_overlaps(
    ours: Sequence[Activity],
    others: Iterable[Activity],
    events: Iterable[RecordedEvent],
    *,
    downstreams: Mapping[int, frozenset[str]],
) -> list[Overlap]:
    """What overlapped ``ours`` (one experiment's runs), one :class:`Overlap` per other
    experiment or event and reason, sorted by start.

    Another experiment's run counts when it shared a moment with one of ours on the same
    host or machine, or, on any host, when the two experiments' services share a
    downstream (``downstreams``: experiment id -> its service's isolation.downstreams()).
    An event counts when it shared a moment with one of our runs on the host (or machine)
    it names, or with any of our runs when its service is ours or one of our downstreams.
    Runs of our own experiment (its arms, both sides of an A/A) never count.
    """
    if not ours:
        return []
    own = ours[0].experiment_id
    our_service = ours[0].service
    mine = downstreams.get(own, frozenset())
    found = _Found()
    for other in others:
        if other.experiment_id == own:
            continue
        what = f"experiment {other.experiment_id} ({other.service})"
        shared = sorted(mine & downstreams.get(other.experiment_id, frozenset()))
        for run in ours:
            if not _meets(run.start_s, run.stop_s, other.start_s, other.stop_s):
                continue
            reasons = [f"same downstream {address}" for address in shared]
            if (reason := _host_reason(run, other.host, other.machine)) is not None:
                reasons.append(reason)
            for reason in reasons:
                found.add(("experiment", what, reason, ""), other.start_s, other.stop_s,
                          run.trial)  # fmt: skip
    touched = {our_service: f"same service {our_service}"} | {
        address: f"same downstream {address}" for address in mine
    }
    for event in events:
        for run in ours:
            if not _event_meets(run, event):
                continue
            reasons = []
            if event.host is not None and event.host in (run.host, run.machine):
                reasons.append(f"same host {event.host}")
            if event.service in touched:
                reasons.append(touched[event.service])
            for reason in reasons:
                found.add((event.kind, event.service, reason, event.note), event.started_at,
                          event.ended_at, run.trial)  # fmt: skip
    return found.result()


def spec_downstreams(spec: str) -> frozenset[str]:
    """The downstreams of a stored experiment's service (its ``[service.isolation]``); none
    when it has no isolation or the stored spec cannot be read as one (an older schema):
    a report must not fail over the guard."""
    try:
        isolation = json.loads(spec).get("service", {}).get("isolation")
        if not isolation:
            return frozenset()
        return frozenset(IsolationConfig.model_validate(isolation).downstreams())
    except (ValueError, AttributeError, ValidationError):
        return frozenset()


def overlaps(
    store: Store, experiment_id: int, *, clock: Callable[[], float] = time.time
) -> list[Overlap]:
    """What overlapped ``experiment_id``'s runs (:func:`find_overlaps`), read in one
    transaction: the runs of it and of every experiment that ran within its span, their
    services' isolation, and the events within its span."""
    now_s = clock()
    stop = func.coalesce(Run.stopped_at, now_s)
    span = (
        select(func.min(Run.started_at).label("lo"), func.max(stop).label("hi"))
        .where(Run.experiment_id == experiment_id)
        .subquery()
    )
    with store.transaction() as session:
        rows = session.execute(
            select(Run.experiment_id, Service.name, Run.trial, Host.name, Host.machine,
                   Run.started_at, stop, span.c.lo, span.c.hi)
            .join(Host, Host.id == Run.host_id)
            .join(Experiment, Experiment.id == Run.experiment_id)
            .join(Service, Service.id == Experiment.service_id)
            .join(span, span.c.lo.is_not(None))
            .where(or_(Run.experiment_id == experiment_id,
                       and_(Run.started_at < span.c.hi, stop > span.c.lo)))
        ).all()  # fmt: skip
        if not rows:
            return []
        lo_s, hi_s = float(rows[0][7]), float(rows[0][8])
        specs = session.execute(
            select(Experiment.id, Experiment.spec).where(
                Experiment.id.in_({int(r[0]) for r in rows})
            )
        ).all()
        event_rows = session.scalars(
            select(LabEvent).where(
                LabEvent.started_at < hi_s,
                func.coalesce(LabEvent.ended_at, LabEvent.started_at) >= lo_s,
            )
        ).all()
        events = [recorded_event(e) for e in event_rows]
    activities = [
        Activity(experiment_id=int(e), service=s, trial=int(t), host=h, machine=m,
                 start_s=float(a), stop_s=float(b))
        for e, s, t, h, m, a, b, _, _ in rows
    ]  # fmt: skip
    ours = [a for a in activities if a.experiment_id == experiment_id]
    return find_overlaps(
        ours,
        [a for a in activities if a.experiment_id != experiment_id],
        events,
        downstreams={int(i): spec_downstreams(spec) for i, spec in specs},
    )
