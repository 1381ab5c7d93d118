"""The host inventory, allocation and quotas (DESIGN.md: hosts/).

Locally a host is a CPU set of this machine: the CPUs this process may use are cut into
hosts of ``cpus_per_host`` CPUs each, and, with three or more CPUs, one is kept for the
engine so that load generation does not steal time from an arm. Each host's facts are
probed and stored on its row (and copied onto every run that uses it).

An experiment takes one host per arm. Allocation is one transaction: it takes the team's
quota row first (an ``UPDATE`` that locks it, so that two experiments of one team cannot
both pass the quota check), then claims free hosts with a compare-and-set per host. A host
allocation carries the experiment's lease expiry and is renewed with it, so hosts held by a
dead processor become free when its lease runs out.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, or_, select, update

from hairline.errors import HostsUnavailable
from hairline.hosts.facts import probe_facts
from hairline.store.db import Store
from hairline.store.models import Host, Quota

__all__ = [
    "Allocation",
    "Layout",
    "Waiting",
    "allocate",
    "ensure_local_hosts",
    "held_hosts",
    "inventory",
    "local_layout",
    "release_hosts",
    "set_quota",
]


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
            facts = json.dumps(probe_facts(cpus).as_dict())
            cpu_text = ",".join(map(str, cpus))
            row = existing.get(name)
            if row is None:
                session.add(
                    Host(name=name, backend="local", machine=machine, cpus=cpu_text,
                         facts=facts, enabled=True)
                )  # fmt: skip
            else:
                row.cpus, row.facts, row.enabled = cpu_text, facts, True
        for name, row in existing.items():
            if name not in names:
                row.enabled = False
    return layout


@dataclass(frozen=True)
class Allocation:
    host_ids: tuple[int, ...]
    names: tuple[str, ...]
    cpus: tuple[tuple[int, ...], ...]
    facts: tuple[dict[str, str], ...]


@dataclass(frozen=True)
class Waiting:
    """Hosts are busy now; try again later."""

    reason: str


def _host_free(now: float) -> object:
    return or_(
        Host.experiment_id.is_(None),
        Host.lease_expires_at.is_(None),
        Host.lease_expires_at < now,
    )


def set_quota(store: Store, team: str, max_hosts: int) -> None:
    with store.transaction() as session:
        row = session.get(Quota, team)
        if row is None:
            session.add(Quota(team=team, max_hosts=max_hosts))
        else:
            row.max_hosts = max_hosts


def allocate(
    store: Store,
    experiment_id: int,
    team: str,
    count: int,
    *,
    lease_s: float,
    clock: Callable[[], float] = time.time,
) -> Allocation | Waiting:
    """Give ``experiment_id`` ``count`` hosts of this machine, within ``team``'s quota."""
    now = clock()
    machine = _machine()
    with store.transaction() as session:
        enabled = session.scalar(
            select(func.count()).select_from(Host).where(Host.machine == machine, Host.enabled)
        )
        quota = session.get(Quota, team)
        if quota is None:
            # A team without a quota row may use the whole local inventory, one experiment
            # at a time per host; the row exists from now on so that it can be locked.
            quota = Quota(team=team, max_hosts=int(enabled or 0))
            session.add(quota)
            session.flush()
        session.execute(update(Quota).where(Quota.team == team).values(max_hosts=Quota.max_hosts))
        if count > quota.max_hosts:
            raise HostsUnavailable(
                f"team {team!r} may hold {quota.max_hosts} hosts at once; this experiment "
                f"needs {count} (one per arm)",
                hint=f"raise it with `hairline lab quota {team} {count}`, or run fewer arms",
            )
        if count > (enabled or 0):
            raise HostsUnavailable(
                f"this machine has {enabled} hosts (CPU sets); the experiment needs {count}",
                hint="use fewer arms, or a smaller --cpus-per-host",
            )
        mine = session.scalars(
            select(Host).where(Host.experiment_id == experiment_id).order_by(Host.id)
        ).all()
        if len(mine) == count:
            for host in mine:
                host.lease_expires_at = now + lease_s
            return _allocation(mine)
        held = session.scalar(
            select(func.count())
            .select_from(Host)
            .where(
                Host.team == team,
                Host.experiment_id.is_not(None),
                Host.experiment_id != experiment_id,
                Host.lease_expires_at >= now,
            )
        )
        if (held or 0) + count > quota.max_hosts:
            return Waiting(f"team {team!r} holds {held} of its {quota.max_hosts} hosts")
        free = session.scalars(
            select(Host)
            .where(Host.machine == machine, Host.enabled, _host_free(now))  # type: ignore[arg-type]
            .order_by(Host.id)
            .limit(count)
            .with_for_update(skip_locked=True)
        ).all()
        if len(free) < count:
            return Waiting(f"{len(free)} of the {count} hosts it needs are free")
        for host in free:
            taken = session.execute(
                update(Host)
                .where(and_(Host.id == host.id, _host_free(now)))  # type: ignore[arg-type]
                .values(
                    experiment_id=experiment_id,
                    team=team,
                    allocated_at=now,
                    lease_expires_at=now + lease_s,
                )
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                session.rollback()
                return Waiting("another experiment took a host at the same moment")
        session.flush()
        rows = session.scalars(
            select(Host).where(Host.experiment_id == experiment_id).order_by(Host.id)
        ).all()
        return _allocation(rows)


def _allocation(rows: Sequence[Host]) -> Allocation:
    return Allocation(
        host_ids=tuple(h.id for h in rows),
        names=tuple(h.name for h in rows),
        cpus=tuple(tuple(int(c) for c in h.cpus.split(",")) for h in rows),
        facts=tuple(json.loads(h.facts) for h in rows),
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


def inventory(store: Store) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Every host with its facts and allocation, and every team's quota."""
    with store.transaction() as session:
        rows = [
            {
                "name": h.name,
                "cpus": h.cpus,
                "enabled": h.enabled,
                "experiment": h.experiment_id,
                "team": h.team,
                "facts": json.loads(h.facts),
            }
            for h in session.scalars(select(Host).order_by(Host.id))
        ]
        quotas = {q.team: q.max_hosts for q in session.scalars(select(Quota))}
    return rows, quotas
