"""The host inventory, allocation with leases, team quotas (overall and per region).

Locally a host is a CPU set of this machine: the CPUs this process may use are cut into
hosts of ``cpus_per_host`` CPUs each, and, with three or more CPUs, one is kept for the
engine so that load generation does not steal time from an arm. Each host's facts are
probed and stored on its row (and copied onto every run that uses it). With the ``ray``
backend a host is a test machine that ``hairline agent start`` registered; either way the
facts allocation matches on are columns of its row.

An experiment takes one host per arm, chosen by :mod:`hairline.hosts.similar` among the
enabled, healthy, free hosts of its backend. Allocation is one short transaction:

1. lock the team's quota rows with an ``UPDATE`` that changes nothing (a row lock on
   PostgreSQL, the write lock on SQLite), so that two experiments of one team cannot both
   pass the quota check; a team without quota rows may use every host and locks nothing;
2. read the free hosts grouped by their class columns (one indexed query; no facts JSON is
   parsed) and the team's hosts held per region;
3. choose (pure);
4. select the chosen hosts ``FOR UPDATE SKIP LOCKED`` and take them with one
   compare-and-set ``UPDATE``, checked by its row count.

A host allocation carries the experiment's lease expiry and is renewed with it, so hosts
held by a dead processor become free when its lease runs out. The region of an
experiment's first allocation is recorded on it, and every later allocation (a host that
died, a processor that took over) comes from the same region and, for hosts kept, the
same class.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select, update
from sqlalchemy.orm import Session

from hairline.config import ExperimentConfig
from hairline.errors import HostsUnavailable
from hairline.hosts.facts import probe_facts
from hairline.hosts.similar import (
    GROUP_FACTS,
    Group,
    NoChoice,
    Requirements,
    assign_slots,
    choose,
    shared_facts,
)
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Quota, RegionQuota

__all__ = [
    "LOCAL_BACKEND",
    "Allocation",
    "Layout",
    "TeamUsage",
    "Waiting",
    "allocate",
    "ensure_local_hosts",
    "held_hosts",
    "inventory",
    "local_layout",
    "parse_cpus",
    "region_quotas",
    "release_hosts",
    "requirements_for",
    "set_quota",
    "team_usage",
]

LOCAL_BACKEND = "local"
# Room for a team without a quota: more hosts than any inventory holds.
_UNLIMITED = 1 << 40


@dataclass(frozen=True)
class Layout:
    hosts: tuple[tuple[int, ...], ...]
    engine_cpus: tuple[int, ...]


def local_layout(cpus: Sequence[int], *, cpus_per_host: int | None = None) -> Layout:
    """Cut ``cpus`` into hosts, keeping one CPU (and any remainder) for the engine when
    there are three or more."""
    ordered = sorted(set(cpus))
    engine = ordered[-1:] if len(ordered) >= 3 else []
    rest = ordered[: len(ordered) - len(engine)]
    size = cpus_per_host or max(1, len(rest) // 2)
    if size > len(rest):
        raise HostsUnavailable(
            f"{size} CPUs per host but only {len(rest)} CPUs for hosts",
            hint="use a smaller --cpus-per-host",
        )
    count = len(rest) // size
    hosts = tuple(tuple(rest[i * size : (i + 1) * size]) for i in range(count))
    leftover = rest[count * size :]
    return Layout(hosts=hosts, engine_cpus=tuple(sorted([*leftover, *engine])))


def _machine() -> str:
    return socket.gethostname()


def ensure_local_hosts(
    store: Store, *, cpus_per_host: int | None = None, clock: Callable[[], float] = time.time
) -> Layout:
    """Make the inventory's local hosts match this machine's CPU sets; return the layout."""
    layout = local_layout(sorted(os.sched_getaffinity(0)), cpus_per_host=cpus_per_host)
    machine = _machine()
    names = {}
    for cpus in layout.hosts:
        span = f"{cpus[0]}" if len(cpus) == 1 else f"{cpus[0]}-{cpus[-1]}"
        names[f"{machine}/cpu{span}"] = cpus
    with store.transaction() as session:
        existing = {h.name: h for h in session.scalars(select(Host).where(Host.machine == machine))}
        for name, cpus in names.items():
            probed = probe_facts(cpus)
            columns = {
                "cpus": ",".join(map(str, cpus)),
                "facts": json.dumps(probed.as_dict()),
                "enabled": True,
                "cpu_arch": probed.arch,
                "cpu_model": probed.cpu_model,
                "kernel": probed.kernel,
                "turbo": probed.turbo,
            }
            row = existing.get(name)
            if row is None:
                session.add(Host(name=name, backend=LOCAL_BACKEND, machine=machine, **columns))
            else:
                for key, value in columns.items():
                    setattr(row, key, value)
        for name, row in existing.items():
            if name not in names:
                row.enabled = False
    return layout


@dataclass(frozen=True)
class Allocation:
    """An experiment's hosts, one per arm, in arm order where the arms are host classes
    (hardware mode), else by host id. ``addresses`` is None for local CPU sets."""

    host_ids: tuple[int, ...]
    names: tuple[str, ...]
    cpus: tuple[tuple[int, ...], ...]
    facts: tuple[dict[str, str], ...]
    addresses: tuple[str | None, ...]
    regions: tuple[str, ...]


@dataclass(frozen=True)
class Waiting:
    """Hosts are busy now; try again later."""

    reason: str


def _host_free(now: float) -> ColumnElement[bool]:
    return or_(
        Host.experiment_id.is_(None),
        Host.lease_expires_at.is_(None),
        Host.lease_expires_at < now,
    )


def _enabled(backend: str) -> list[ColumnElement[bool]]:
    """The enabled hosts of ``backend`` (locally: this machine's CPU sets)."""
    where = [Host.backend == backend, Host.enabled.is_(True)]
    if backend == LOCAL_BACKEND:
        where.append(Host.machine == _machine())
    return where


def _usable(backend: str) -> list[ColumnElement[bool]]:
    """Hosts of ``backend`` an experiment may be given: enabled and healthy."""
    return [*_enabled(backend), Host.healthy.is_(True)]


def set_quota(store: Store, team: str, max_hosts: int, *, region: str | None = None) -> None:
    """The most hosts ``team`` may hold at once, overall or in ``region``."""
    with store.transaction() as session:
        if region is None:
            row = session.get(Quota, team)
            if row is None:
                session.add(Quota(team=team, max_hosts=max_hosts))
            else:
                row.max_hosts = max_hosts
        else:
            regional = session.get(RegionQuota, (team, region))
            if regional is None:
                session.add(RegionQuota(team=team, region=region, max_hosts=max_hosts))
            else:
                regional.max_hosts = max_hosts


def _lock_quotas(session: Session, team: str) -> tuple[int | None, dict[str, int]]:
    """Lock and read the team's quota rows: (overall or None, {region: max})."""
    overall = session.execute(
        update(Quota)
        .where(Quota.team == team)
        .values(max_hosts=Quota.max_hosts)
        .returning(Quota.max_hosts)
    ).scalar()
    regional = session.execute(
        update(RegionQuota)
        .where(RegionQuota.team == team)
        .values(max_hosts=RegionQuota.max_hosts)
        .returning(RegionQuota.region, RegionQuota.max_hosts)
    ).all()
    return overall, {str(region): int(n) for region, n in regional}


def requirements_for(
    config: ExperimentConfig,
    arm_names: Sequence[str],
    cov: Mapping[tuple[str, str], float] | None = None,
) -> Requirements:
    """What ``config`` asks of its hosts: in hardware mode each arm's host class (in
    ``arm_names`` order), and the CoV above which a CPU model or kernel is avoided."""
    arms: tuple[dict[str, str], ...] = ()
    if config.design.mode == "hardware":
        arms = tuple(
            hosts.facts() if (hosts := config.arms[name].hosts) is not None else {}
            for name in arm_names
        )
    return Requirements(arms=arms, max_cov=config.hosts.cov_limit, cov=dict(cov or {}))


def _group_facts(host: Host) -> dict[str, str]:
    return {f: str(getattr(host, f)) for f in GROUP_FACTS}


def allocate(
    store: Store,
    experiment_id: int,
    team: str,
    count: int,
    *,
    lease_s: float,
    clock: Callable[[], float] = time.time,
    backend: str = LOCAL_BACKEND,
    requirements: Requirements | None = None,
) -> Allocation | Waiting:
    """Give ``experiment_id`` ``count`` nearly identical hosts of ``backend`` within
    ``team``'s quotas, or say why it must wait.

    Raises :class:`HostsUnavailable` when it never could: more hosts than the team's quota
    or than the backend has. Called again for an experiment that holds its hosts, it
    renews and returns them; hosts of it that died (unhealthy) or were disabled are given
    back and replaced by hosts of the same class.
    """
    requirements = requirements or Requirements()
    if requirements.arms and len(requirements.arms) != count:
        raise ValueError(f"{len(requirements.arms)} arm classes for {count} hosts")
    now = clock()
    with store.transaction() as session:
        overall, regional = _lock_quotas(session, team)
        pool = session.scalar(select(func.count()).select_from(Host).where(*_enabled(backend)))
        _never(team, count, overall, pool or 0, backend)
        if backend == LOCAL_BACKEND and requirements.hardware:
            _local_classes_exist(session, requirements)
        mine = session.scalars(
            select(Host).where(Host.experiment_id == experiment_id).order_by(Host.id)
        ).all()
        kept = [h for h in mine if h.enabled and h.healthy and h.backend == backend]
        gone = [h.id for h in mine if h not in kept]
        if gone:
            session.execute(
                update(Host)
                .where(Host.id.in_(gone))
                .values(experiment_id=None, team=None, allocated_at=None, lease_expires_at=None)
            )
        if len(kept) > count:
            kept = kept[:count]
        for host in kept:
            host.lease_expires_at = now + lease_s
        if len(kept) == count:
            return _allocation(_in_arm_order(kept, requirements))
        held = _held_by_region(session, team, experiment_id, now)
        held_total = sum(held.values())
        if overall is not None and held_total + count > overall:
            return Waiting(f"team {team!r} holds {held_total} of its {overall} hosts")
        recorded = session.scalar(select(Experiment.region).where(Experiment.id == experiment_id))
        pinned = _pinned(kept, recorded, requirements)
        groups = _free_groups(session, backend, now, pinned.get("region"))
        room = _room(groups, held, held_total, overall, regional, len(kept))
        slots = _open_slots(kept, count, requirements)
        choice = choose(groups, slots, room=room, requirements=requirements, pinned=pinned)
        if isinstance(choice, NoChoice):
            return Waiting(choice.reason)
        taken = _take(session, choice.slots, backend, experiment_id, team, now, lease_s)
        if taken is None:
            session.rollback()
            return Waiting("another experiment took a host at the same moment")
        if recorded is None:
            session.execute(
                update(Experiment)
                .where(Experiment.id == experiment_id, Experiment.region.is_(None))
                .values(region=choice.region)
            )
        return _allocation(_in_arm_order([*kept, *taken], requirements))


def _never(team: str, count: int, overall: int | None, pool: int, backend: str) -> None:
    if overall is not None and count > overall:
        raise HostsUnavailable(
            f"team {team!r} may hold {overall} hosts at once; this experiment "
            f"needs {count} (one per arm)",
            hint=f"raise it with `hairline lab quota {team} {count}`, or run fewer arms",
        )
    if count > pool:
        if backend == LOCAL_BACKEND:
            raise HostsUnavailable(
                f"this machine has {pool} hosts (CPU sets); the experiment needs {count}",
                hint="use fewer arms, or a smaller --cpus-per-host",
            )
        raise HostsUnavailable(
            f"the {backend} backend has {pool} hosts; the experiment needs {count}",
            hint="join more test machines with `hairline agent start`, or run fewer arms",
        )


def _local_classes_exist(session: Session, requirements: Requirements) -> None:
    """Hardware mode on this machine's CPU sets: every arm's class must be here, or the
    experiment would wait for hosts that can never come."""
    for facts in requirements.arms:
        found = session.scalar(
            select(func.count())
            .select_from(Host)
            .where(*_enabled(LOCAL_BACKEND), *(getattr(Host, k) == v for k, v in facts.items()))
        )
        if not found:
            wanted = ", ".join(f"{k} {v!r}" for k, v in facts.items())
            raise HostsUnavailable(
                f"no host of this machine has {wanted}; hardware mode compares machines",
                hint="run it on test machines of each class (docs/scale-out.md), or name "
                "facts this machine has ([arms.X] hosts; `hairline lab hosts` lists them)",
            )


def _held_by_region(session: Session, team: str, experiment_id: int, now: float) -> dict[str, int]:
    """The team's hosts held by its other experiments, per region."""
    rows = session.execute(
        select(Host.region, func.count())
        .where(
            Host.team == team,
            Host.experiment_id.is_not(None),
            Host.experiment_id != experiment_id,
            Host.lease_expires_at >= now,
        )
        .group_by(Host.region)
    ).all()
    return {str(region): int(n) for region, n in rows}


def _pinned(
    kept: Sequence[Host], recorded: str | None, requirements: Requirements
) -> dict[str, str]:
    """Facts the new hosts must have: the experiment's region, the kept hosts' shared facts."""
    pinned: dict[str, str] = {}
    if recorded is not None:
        pinned["region"] = recorded
    if kept:
        shared = shared_facts(requirements.arms)
        pinned.update({f: str(getattr(kept[0], f)) for f in shared})
    return pinned


def _free_groups(session: Session, backend: str, now: float, region: str | None) -> list[Group]:
    columns = [getattr(Host, f) for f in GROUP_FACTS]
    query = select(*columns, func.count()).where(*_usable(backend), _host_free(now))
    if region is not None:
        query = query.where(Host.region == region)
    rows = session.execute(query.group_by(*columns)).all()
    return [
        Group(**{f: str(v) for f, v in zip(GROUP_FACTS, row[:-1], strict=True)}, free=int(row[-1]))
        for row in rows
    ]


def _room(
    groups: Sequence[Group],
    held: Mapping[str, int],
    held_total: int,
    overall: int | None,
    regional: Mapping[str, int],
    kept: int,
) -> dict[str, int]:
    """How many more hosts the team may take in each region with free hosts: its region
    quota left where it has one, never more than its overall quota left."""
    left = _UNLIMITED if overall is None else overall - held_total
    room = {}
    for region in {g.region for g in groups}:
        here = left
        if region in regional:
            here = min(here, regional[region] - held.get(region, 0))
        room[region] = here - kept
    return room


def _open_slots(
    kept: Sequence[Host], count: int, requirements: Requirements
) -> list[Mapping[str, str]]:
    if not requirements.arms:
        return [{} for _ in range(count - len(kept))]
    given = assign_slots([_group_facts(h) for h in kept], requirements.arms)
    return [arm for arm, host in zip(requirements.arms, given, strict=True) if host is None]


def _take(
    session: Session,
    slots: Sequence[Group],
    backend: str,
    experiment_id: int,
    team: str,
    now: float,
    lease_s: float,
) -> list[Host] | None:
    """Lock and take the chosen groups' hosts; None if others took them first."""
    wanted: dict[Group, int] = {}
    for group in slots:
        wanted[group] = wanted.get(group, 0) + 1
    rows: list[Host] = []
    for group, n in wanted.items():
        found = session.scalars(
            select(Host)
            .where(
                *_usable(backend),
                _host_free(now),
                *(getattr(Host, f) == group.fact(f) for f in GROUP_FACTS),
            )
            .order_by(Host.id)
            .limit(n)
            .with_for_update(skip_locked=True)
        ).all()
        if len(found) < n:
            return None
        rows.extend(found)
    ids = [h.id for h in rows]
    result = session.execute(
        update(Host)
        .where(and_(Host.id.in_(ids), _host_free(now)))
        .values(
            experiment_id=experiment_id,
            team=team,
            allocated_at=now,
            lease_expires_at=now + lease_s,
        )
        .execution_options(synchronize_session=False)
    )
    # The rows' allocation columns stay stale in this session: nothing reads them below.
    if result.rowcount != len(ids):  # type: ignore[attr-defined]
        return None
    return rows


def _in_arm_order(hosts: Sequence[Host], requirements: Requirements) -> list[Host]:
    """Hosts by id, or, in hardware mode, each arm's host in arm order."""
    ordered = sorted(hosts, key=lambda h: h.id)
    if not requirements.arms:
        return ordered
    given = assign_slots([_group_facts(h) for h in ordered], requirements.arms)
    return [ordered[i] for i in given if i is not None]


def parse_cpus(text: str) -> tuple[int, ...]:
    """A CPU list as stored ("2,3" or the kernel's "0-3,8") to numbers; () if empty."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if part:
            first, _, last = part.partition("-")
            cpus.extend(range(int(first), int(last or first) + 1))
    return tuple(cpus)


def _facts(host: Host) -> dict[str, str]:
    """The host's facts JSON, with the class columns filled in where it lacks them."""
    facts: dict[str, str] = {str(k): str(v) for k, v in json.loads(host.facts or "{}").items()}
    facts.setdefault("region", host.region)
    facts.setdefault("server_type", host.server_type)
    facts.setdefault("arch", host.cpu_arch)
    facts.setdefault("cpu_model", host.cpu_model)
    facts.setdefault("kernel", host.kernel)
    facts.setdefault("turbo", host.turbo)
    return facts


def _allocation(rows: Sequence[Host]) -> Allocation:
    return Allocation(
        host_ids=tuple(h.id for h in rows),
        names=tuple(h.name for h in rows),
        cpus=tuple(parse_cpus(h.cpus) for h in rows),
        facts=tuple(_facts(h) for h in rows),
        addresses=tuple(h.address for h in rows),
        regions=tuple(h.region for h in rows),
    )


def release_hosts(store: Store, experiment_id: int) -> None:
    with store.transaction() as session:
        session.execute(
            update(Host)
            .where(Host.experiment_id == experiment_id)
            .values(experiment_id=None, team=None, allocated_at=None, lease_expires_at=None)
        )


def held_hosts(store: Store) -> list[tuple[str, int]]:
    """Hosts currently allocated: (name, experiment id)."""
    with store.transaction() as session:
        rows = session.execute(
            select(Host.name, Host.experiment_id).where(Host.experiment_id.is_not(None))
        ).all()
        return [(name, int(eid)) for name, eid in rows if eid is not None]


@dataclass(frozen=True)
class TeamUsage:
    """What fairness between teams needs: hosts held per team, quotas, the pool's size."""

    held: dict[str, int]
    quotas: dict[str, int]
    pool: int


def team_usage(session: Session, now: float) -> TeamUsage:
    """Every team's hosts held now (allocations whose lease runs), every overall quota,
    and the enabled healthy hosts of every backend."""
    held = session.execute(
        select(Host.team, func.count())
        .where(Host.team.is_not(None), Host.experiment_id.is_not(None),
               Host.lease_expires_at >= now)
        .group_by(Host.team)
    ).all()  # fmt: skip
    quotas = session.execute(select(Quota.team, Quota.max_hosts)).all()
    pool = session.scalar(
        select(func.count()).select_from(Host).where(Host.enabled.is_(True), Host.healthy.is_(True))
    )
    return TeamUsage(
        held={str(t): int(n) for t, n in held},
        quotas={str(t): int(n) for t, n in quotas},
        pool=int(pool or 0),
    )


def inventory(store: Store) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every host with its class, health, facts and allocation, and every team's quota."""
    with store.transaction() as session:
        rows = [
            {
                "name": h.name,
                "backend": h.backend,
                "address": h.address,
                "cpus": h.cpus,
                "enabled": h.enabled,
                "healthy": h.healthy,
                "health_note": h.health_note,
                "region": h.region,
                "server_type": h.server_type,
                "cpu_arch": h.cpu_arch,
                "cpu_model": h.cpu_model,
                "kernel": h.kernel,
                "turbo": h.turbo,
                "experiment": h.experiment_id,
                "team": h.team,
                "facts": json.loads(h.facts or "{}"),
            }
            for h in session.scalars(select(Host).order_by(Host.id))
        ]
        quotas = {q.team: q.max_hosts for q in session.scalars(select(Quota))}
    return rows, quotas


def region_quotas(store: Store) -> dict[str, dict[str, int]]:
    """Every team's quotas per region: {team: {region: max hosts}}."""
    regional: dict[str, dict[str, int]] = {}
    with store.transaction() as session:
        for r in session.scalars(select(RegionQuota).order_by(RegionQuota.team)):
            regional.setdefault(r.team, {})[r.region] = r.max_hosts
    return regional
