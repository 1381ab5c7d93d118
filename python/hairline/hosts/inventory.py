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
4. take the hosts with one ``UPDATE ... RETURNING`` per chosen class, whose candidates
   are selected ``FOR UPDATE SKIP LOCKED`` in the same statement; fewer hosts than asked
   rolls the whole allocation back.

A host allocation carries the experiment's lease expiry and is renewed with it, so hosts
held by a dead processor become free when its lease runs out. The region of an
experiment's first allocation is recorded on it, and every later allocation (a host that
died, a processor that took over) comes from the same region and, for hosts kept, the
same class.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Connection, or_, select

from hairline.config import ExperimentConfig
from hairline.errors import HostsUnavailable, HostTakenMeanwhile
from hairline.hosts.counts import ClassCounts, cached_counts, class_counts, count_taken
from hairline.hosts.factors import cov_by_fact
from hairline.hosts.facts import probe_facts
from hairline.hosts.layout import Layout, local_host_names, local_layout
from hairline.hosts.pinning import allocate_named
from hairline.hosts.quotas import (
    check_overall_quota,
    count_held,
    held_by_region,
    room_by_region,
)
from hairline.hosts.rows import (
    LOCAL_BACKEND,
    kept_hosts_locking_quotas,
    local_classes_exist,
    release,
    take_hosts,
)
from hairline.hosts.similar import (
    GROUP_FACTS,
    NoChoice,
    Requirements,
    assign_slots,
    choose,
    shared_facts,
)
from hairline.kit.cpulist import parse_cpu_list
from hairline.store.db import Store
from hairline.store.models import Host

__all__ = [
    "LOCAL_BACKEND",
    "Allocation",
    "Waiting",
    "allocate",
    "duet_arms",
    "ensure_local_hosts",
    "held_hosts",
    "parse_cpus",
    "release_hosts",
    "requirements_for",
]


def _machine() -> str:
    return socket.gethostname()


def duet_arms(config: ExperimentConfig, arms: int) -> int | None:
    """What ensure_local_hosts's ``duet_arms`` is for this experiment: its arm count under
    ``[hosts] local_layout = "duet"``, else None (the split layout)."""
    return arms if config.hosts.local_layout == "duet" else None


def ensure_local_hosts(
    store: Store,
    *,
    cpus_per_host: int | None = None,
    duet_arms: int | None = None,
    clock: Callable[[], float] = time.time,
) -> Layout:
    """Make the inventory's local hosts match this machine's CPU sets; return the layout.
    ``duet_arms``: the duet layout for that many arms (local_layout); the split layout's
    hosts are then disabled until an experiment asks for them again, and the other way
    round (one experiment at a time holds this machine's hosts)."""
    layout = local_layout(
        sorted(os.sched_getaffinity(0)), cpus_per_host=cpus_per_host, duet_arms=duet_arms
    )
    machine = _machine()
    names = local_host_names(machine, layout)
    with store.transaction() as session:
        # Only this machine's CPU sets: an agent on the same machine may have registered
        # Ray hosts into the same database, and those are not ours to disable.
        mine = select(Host).where(Host.machine == machine, Host.backend == LOCAL_BACKEND)
        existing = {h.name: h for h in session.scalars(mine)}
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


# How long the CoV of CPU models and kernels read from the A/A runs is used before it is
# read again: reading means every stored A/A trial of the service, and it changes slowly.
COV_TTL_S = 300.0
_cov: dict[tuple[str, str], tuple[float, dict[tuple[str, str], float]]] = {}


def _stored_cov(store: Store, service: str) -> dict[tuple[str, str], float]:
    key = (store.url, service)
    cached = _cov.get(key)
    if cached is not None and time.monotonic() - cached[0] < COV_TTL_S:
        return cached[1]
    cov = cov_by_fact(store, service=service)
    _cov[key] = (time.monotonic(), cov)
    return cov


def requirements_for(
    config: ExperimentConfig,
    arm_names: Sequence[str],
    *,
    store: Store | None = None,
    backend: str = LOCAL_BACKEND,
) -> Requirements:
    """What ``config`` asks of its hosts: in hardware mode each arm's host class (in
    ``arm_names`` order), and the CoV above which a CPU model or kernel is avoided, with
    the CoV of each in the service's stored A/A runs (``hosts/factors.py``) when ``store``
    is given and the backend has hosts to choose between (not this machine's CPU sets)."""
    arms: tuple[dict[str, str], ...] = ()
    if config.design.mode == "hardware":
        arms = tuple(
            hosts.facts() if (hosts := config.arms[name].hosts) is not None else {}
            for name in arm_names
        )
    limit = config.hosts.cov_limit
    cov = {}
    if store is not None and limit is not None and backend != LOCAL_BACKEND:
        cov = _stored_cov(store, config.service.name)
    pin = config.hosts.pin
    names = tuple(tuple(pin.get(name, ())) for name in arm_names) if pin else ()
    return Requirements(arms=arms, max_cov=limit, cov=cov, names=names)


def _group_facts(host: Any) -> dict[str, str]:
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
    if requirements.names:
        named = allocate_named(store, experiment_id, team, requirements.names, now=now,
                               lease_s=lease_s, backend=backend)  # fmt: skip
        return Waiting(named) if isinstance(named, str) else _allocation(named)

    def refresh() -> None:
        with store.engine.connect() as connection:
            _counts_now(connection, store, backend, now)

    counts = cached_counts(store, backend, refresh=refresh)
    for fresh in (counts is None, True):
        if fresh:
            # Counted outside the allocation's transaction, so that no quota lock is held
            # while the whole inventory is scanned.
            with store.engine.connect() as connection:
                counts = _counts_now(connection, store, backend, now)
        assert counts is not None
        try:
            with store.engine.begin() as connection:
                return _allocate(
                    connection, store, experiment_id, team, count, counts, fresh=fresh,
                    now=now, lease_s=lease_s, backend=backend, requirements=requirements,
                )  # fmt: skip
        except _Stale:
            continue
        except HostTakenMeanwhile:
            break
    return Waiting("another experiment took a host at the same moment")


def _counts_now(connection: Connection, store: Store, backend: str, now: float) -> ClassCounts:
    return class_counts(
        connection, store, backend, enabled=_enabled(backend), free=_host_free(now), fresh=True
    )


class _Stale(Exception):
    """The class counts (up to a second old) gave a choice that failed: the transaction
    rolls back, and the choice is made again from counts read now."""


def _allocate(
    connection: Connection,
    store: Store,
    experiment_id: int,
    team: str,
    count: int,
    counts: ClassCounts,
    *,
    fresh: bool,
    now: float,
    lease_s: float,
    backend: str,
    requirements: Requirements,
) -> Allocation | Waiting:
    """The allocation in its transaction (see :func:`allocate`); ``counts`` rank the
    classes, and a choice they fail raises :class:`_Stale` unless they are ``fresh``."""
    if backend == LOCAL_BACKEND:
        # The CPU sets of one machine share its CPU model and kernel: there is no other
        # host to prefer, and avoiding them all would make the experiment wait forever.
        requirements = dataclasses.replace(requirements, max_cov=None)
    # What is the experiment's own first; the team's quota lock is held from here on.
    kept, recorded, overall, regional = kept_hosts_locking_quotas(
        connection, experiment_id, team, backend, count, now, lease_s
    )
    check_overall_quota(team, overall, count)
    if len(kept) == count:
        return _allocation(_in_arm_order(kept, requirements))
    # What the team holds matters only against a quota: a team without one skips the read.
    limited = overall is not None or bool(regional)
    held = held_by_region(connection, team, experiment_id, now) if limited else {}
    if overall is not None and sum(held.values()) + count > overall:
        return Waiting(f"team {team!r} holds {sum(held.values())} of its {overall} hosts")
    pinned = _pinned(kept, recorded, requirements)
    slots = _open_slots(kept, count, requirements)
    if backend == LOCAL_BACKEND and requirements.hardware:
        local_classes_exist(connection, requirements, enabled=_enabled(backend))
    if count > counts.pool:
        if not fresh:
            raise _Stale
        _too_few(backend, counts.pool, count)
    room = room_by_region(
        {g.region for g in counts.groups}, held=held, overall=overall,
        regional=regional, kept=len(kept),
    )  # fmt: skip
    choice = choose(counts.groups, slots, room=room, requirements=requirements, pinned=pinned)
    if isinstance(choice, NoChoice):
        if not fresh:
            raise _Stale
        return Waiting(choice.reason)
    taken = take_hosts(
        connection, choice.slots, backend, _machine(), experiment_id, team, now, lease_s,
        region_to_record=choice.region if recorded is None else None,
    )  # fmt: skip
    if taken is None:
        raise HostTakenMeanwhile if fresh else _Stale
    count_taken(store, backend, choice.slots)
    count_held(store, team, len(taken))
    return _allocation(_in_arm_order([*kept, *taken], requirements))


def _too_few(backend: str, pool: int, count: int) -> None:
    if backend == LOCAL_BACKEND:
        raise HostsUnavailable(
            f"this machine has {pool} hosts (CPU sets); the experiment needs {count}",
            hint="use fewer arms, or a smaller --cpus-per-host",
        )
    raise HostsUnavailable(
        f"the {backend} backend has {pool} hosts; the experiment needs {count}",
        hint="join more test machines with `hairline agent start`, or run fewer arms",
    )


def _pinned(
    kept: Sequence[Any], recorded: str | None, requirements: Requirements
) -> dict[str, str]:
    """Facts the new hosts must have: the experiment's region, the kept hosts' shared facts."""
    pinned: dict[str, str] = {}
    if recorded is not None:
        pinned["region"] = recorded
    if kept:
        shared = shared_facts(requirements.arms)
        pinned.update({f: str(getattr(kept[0], f)) for f in shared})
    return pinned


def _open_slots(
    kept: Sequence[Any], count: int, requirements: Requirements
) -> list[Mapping[str, str]]:
    if not requirements.arms:
        return [{} for _ in range(count - len(kept))]
    given = assign_slots([_group_facts(h) for h in kept], requirements.arms)
    return [arm for arm, host in zip(requirements.arms, given, strict=True) if host is None]


def _in_arm_order(hosts: Sequence[Any], requirements: Requirements) -> list[Any]:
    """Hosts by id, or, in hardware mode, each arm's host in arm order."""
    ordered = sorted(hosts, key=lambda h: h.id)
    if not requirements.arms:
        return ordered
    given = assign_slots([_group_facts(h) for h in ordered], requirements.arms)
    return [ordered[i] for i in given if i is not None]


def parse_cpus(text: str) -> tuple[int, ...]:
    """A CPU list as stored ("2,3" or the kernel's "0-3,8") to numbers; () if empty."""
    return parse_cpu_list(text)


def _facts(host: Any) -> dict[str, str]:
    """The host's facts JSON, with the class columns filled in where it lacks them."""
    facts: dict[str, str] = {str(k): str(v) for k, v in json.loads(host.facts or "{}").items()}
    facts.setdefault("region", host.region)
    facts.setdefault("server_type", host.server_type)
    facts.setdefault("arch", host.cpu_arch)
    facts.setdefault("cpu_model", host.cpu_model)
    facts.setdefault("kernel", host.kernel)
    facts.setdefault("turbo", host.turbo)
    return facts


def _allocation(rows: Sequence[Any]) -> Allocation:
    return Allocation(
        host_ids=tuple(h.id for h in rows),
        names=tuple(h.name for h in rows),
        cpus=tuple(parse_cpus(h.cpus) for h in rows),
        facts=tuple(_facts(h) for h in rows),
        addresses=tuple(h.address for h in rows),
        regions=tuple(h.region for h in rows),
    )


def release_hosts(store: Store, experiment_id: int) -> None:
    with store.engine.begin() as connection:
        release(connection, experiment_id)


def held_hosts(store: Store) -> list[tuple[str, int]]:
    """Hosts currently allocated: (name, experiment id)."""
    with store.transaction() as session:
        rows = session.execute(
            select(Host.name, Host.experiment_id).where(Host.experiment_id.is_not(None))
        ).all()
        return [(name, int(eid)) for name, eid in rows if eid is not None]
