"""Allocation of named hosts: each arm on one of the hosts ``[hosts] pin`` gives it.

An autotuning run (tune/clusters.py) compares its candidates on a test cluster against
the default configuration on a control cluster, the clusters chosen once and checked by
an A/A: an experiment's hosts are then not chosen by class (hosts/similar.py) but named.
Everything else is as for chosen hosts (hosts/inventory.py): one short transaction with
the team's quota rows locked, hosts held by other experiments skipped, the experiment's
kept hosts renewed, its region recorded, and the hosts taken with a compare-and-set so
that two allocations never share one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, or_, select, update

from hairline.errors import HostsUnavailable, HostTakenMeanwhile
from hairline.hosts.quotas import (
    check_overall_quota,
    count_held,
    held_by_region,
    room_by_region,
)
from hairline.hosts.rows import kept_hosts_locking_quotas, record_region
from hairline.store.db import Store
from hairline.store.models import Host

__all__ = ["allocate_named"]

_HOSTS = cast(Table, Host.__table__)
_H = _HOSTS.c
_FREE_NOW = or_(_H.experiment_id.is_(None), _H.lease_expires_at.is_(None),
                _H.lease_expires_at < bindparam("now"))  # fmt: skip
_NAMED = select(_HOSTS).where(
    _H.name.in_(bindparam("names", expanding=True)), _H.backend == bindparam("h_backend")
)
_TAKE = (
    update(_HOSTS)
    .where(_H.id.in_(bindparam("ids", expanding=True)), _FREE_NOW)
    .values(experiment_id=bindparam("e_id"), team=bindparam("e_team"),
            allocated_at=bindparam("now"), lease_expires_at=bindparam("until"))
    .returning(*_HOSTS.c)
)  # fmt: skip


def allocate_named(
    store: Store,
    experiment_id: int,
    team: str,
    names: Sequence[Sequence[str]],
    *,
    now: float,
    lease_s: float,
    backend: str,
) -> list[Any] | str:
    """Give arm ``i`` of ``experiment_id`` one free host among ``names[i]`` (the first
    free one in that order); the host rows in arm order, or why the experiment waits.

    Raises :class:`HostsUnavailable` when it never could: a name that is no host of
    ``backend``, or more arms than the team's quota.
    """
    try:
        with store.engine.begin() as connection:
            return _allocate(connection, store, experiment_id, team, names, now, lease_s, backend)
    except HostTakenMeanwhile:
        return "another experiment took a pinned host at the same moment"


def _allocate(
    connection: Connection,
    store: Store,
    experiment_id: int,
    team: str,
    names: Sequence[Sequence[str]],
    now: float,
    lease_s: float,
    backend: str,
) -> list[Any] | str:
    count = len(names)
    kept, recorded, overall, regional = kept_hosts_locking_quotas(
        connection, experiment_id, team, backend, count, now, lease_s
    )
    check_overall_quota(team, overall, count)
    given: list[Any | None] = [None] * count
    for host in kept:
        arm = next((i for i in range(count) if given[i] is None and host.name in names[i]), None)
        if arm is not None:
            given[arm] = host
    if all(h is not None for h in given):
        return list(given)
    wanted = sorted({n for arm in names for n in arm})
    rows = {r.name: r for r in connection.execute(_NAMED, {"names": wanted, "h_backend": backend})}
    unknown = [n for n in wanted if n not in rows]
    if unknown:
        raise HostsUnavailable(
            f"[hosts] pin names {', '.join(map(repr, unknown))}, not hosts of the {backend} "
            "backend",
            hint="`hairline lab hosts` lists the hosts; choose the clusters again "
            "(tune/clusters.py) if machines left",
        )
    held = held_by_region(connection, team, experiment_id, now)
    if overall is not None and sum(held.values()) + count > overall:
        return f"team {team!r} holds {sum(held.values())} of its {overall} hosts"
    mine = {h.id for h in kept}
    picked: list[Any] = []
    for arm, allowed in enumerate(names):
        if given[arm] is not None:
            continue
        free = [rows[n] for n in allowed if _usable(rows[n], now, mine) and rows[n] not in picked]
        if not free:
            return f"no host pinned to arm {arm + 1} is free: " + _why_busy(
                [rows[n] for n in allowed], now
            )
        picked.append(free[0])
    region = str(picked[0].region)
    room = room_by_region([region], held=held, overall=overall, regional=regional,
                          kept=len(kept))  # fmt: skip
    if recorded is not None and region != recorded:
        return f"the pinned hosts are in {region}; the experiment's region is {recorded}"
    if room[region] < len(picked):
        return f"the team's quota leaves room for fewer than {len(picked)} hosts in {region}"
    params = {"ids": [h.id for h in picked], "now": now, "e_id": experiment_id,
              "e_team": team, "until": now + lease_s}  # fmt: skip
    taken = {r.id: r for r in connection.execute(_TAKE, params)}
    if len(taken) < len(picked):
        raise HostTakenMeanwhile
    count_held(store, team, len(taken))
    if recorded is None:
        record_region(connection, experiment_id, region)
    fresh = iter(taken[h.id] for h in picked)
    return [h if h is not None else next(fresh) for h in given]


def _usable(host: Any, now: float, mine: set[int]) -> bool:
    free = host.experiment_id is None or host.lease_expires_at is None
    return bool(host.enabled and host.healthy and host.id not in mine and
                (free or host.lease_expires_at < now))  # fmt: skip


def _why_busy(hosts: Sequence[Any], now: float) -> str:
    """Each host and what keeps it: for the progress line of a waiting experiment."""
    out = []
    for host in hosts:
        if not host.enabled:
            why = "disabled"
        elif not host.healthy:
            why = "unhealthy"
        else:
            why = f"held by experiment {host.experiment_id}"
        out.append(f"{host.name} ({why})")
    return ", ".join(out)
