"""Team quotas, overall and per region, and what each team holds (ServiceLab section 5.1).

A quota is the most hosts a team may hold at once; a region quota bounds it in one region
(``hairline lab quota TEAM N [--region R]``). A team without quota rows may use every host.
Allocation locks a team's rows first (:func:`lock_quotas`), so that two experiments of one
team cannot both pass the check; the claim order reads every team's holdings
(:func:`team_usage`) for fairness.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    func,
    literal_column,
    select,
    union_all,
    update,
)

from hairline.errors import HostsUnavailable
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Quota, RegionQuota

__all__ = [
    "CLAIMED_AND_QUOTAS_PARTS",
    "HELD_TTL_S",
    "LOCKING_COLUMNS",
    "UNLIMITED",
    "TeamUsage",
    "check_overall_quota",
    "count_held",
    "held_by_region",
    "lock_quotas",
    "locked_quotas",
    "region_quotas",
    "room_by_region",
    "set_quota",
    "team_usage",
]

# Room for a team without a quota: more hosts than any inventory holds.
UNLIMITED = 1 << 40

# Built once: these run in every allocation and every claim.
_Q = cast(Table, Quota.__table__)
_R = cast(Table, RegionQuota.__table__)
_H = cast(Table, Host.__table__).c
_E = cast(Table, Experiment.__table__).c
_LOCK = (
    update(_Q)
    .where(_Q.c.team == bindparam("t"))
    .values(max_hosts=_Q.c.max_hosts)
    .returning(_Q.c.max_hosts)
)
_LOCK_REGIONS = (
    update(_R)
    .where(_R.c.team == bindparam("t"))
    .values(max_hosts=_R.c.max_hosts)
    .returning(_R.c.region, _R.c.max_hosts)
)
# On PostgreSQL the lock rides on another statement of the allocation (the read of the
# experiment's own hosts, ``hosts/rows.py``): the two UPDATEs as data-modifying CTEs, their
# results as two columns, one round trip fewer per allocation than running them alone.
# Only reads of rows the lock does not guard may share that statement: a statement reads
# the snapshot taken when it began, before the lock may have been waited for, so what the
# team holds is read by the next statement (``held_by_region``).
_LOCKED = _LOCK.cte("locked_quota")
_LOCKED_REGIONS = _LOCK_REGIONS.cte("locked_region_quotas")
LOCKING_COLUMNS = (
    select(_LOCKED.c.max_hosts).scalar_subquery().label("quota_overall"),
    select(func.json_object_agg(_LOCKED_REGIONS.c.region, _LOCKED_REGIONS.c.max_hosts))
    .scalar_subquery()
    .label("quota_regions"),
)
_HELD_BY_REGION = (
    select(_H.region, func.count())
    .where(_H.team == bindparam("t"), _H.experiment_id.is_not(None),
           _H.experiment_id != bindparam("e_id"), _H.lease_expires_at >= bindparam("now"))
    .group_by(_H.region)
)  # fmt: skip
_HELD = (
    select(_H.team, func.count())
    .where(_H.experiment_id.is_not(None), _H.team.is_not(None),
           _H.lease_expires_at >= bindparam("now"))
    .group_by(_H.team)
)  # fmt: skip
# Experiments on their way to hosts, and quotas, by team, as (kind, team, n) rows: one
# round trip. The claim reads them in the statement that reads the queue
# (``lab/queue.py``), so it passes them in; the parts are public for that.
CLAIMED_AND_QUOTAS_PARTS = (
    select(_E.phase.label("kind"), _E.team, func.count().label("n"))
    .where(_E.phase.in_(("queued", "building", "allocating")),
           _E.lease_expires_at >= bindparam("now"))
    .group_by(_E.phase, _E.team),
    select(literal_column("'quota'").label("kind"), _Q.c.team, _Q.c.max_hosts.label("n")),
)  # fmt: skip
_CLAIMED_AND_QUOTAS = union_all(*CLAIMED_AND_QUOTAS_PARTS)
# How old the hosts held per team may be when the claim order is decided from them.
# Counting them scans every held host (1-2 ms of PostgreSQL's time per claim with 3,000
# held, the largest part of a claim: bench/control), and which team is furthest below its
# share changes slowly: hosts are held for the minutes an experiment runs. Experiments
# claimed but not yet given hosts are read at every claim: they change at every claim.
HELD_TTL_S = 1.0
# Per process, by database URL: (time.monotonic() when read, hosts held per team).
_held: dict[str, tuple[float, dict[str, int]]] = {}
_POOL = select(func.count()).select_from(Host.__table__).where(_H.enabled.is_(True),
                                                               _H.healthy.is_(True))  # fmt: skip


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


def region_quotas(store: Store) -> dict[str, dict[str, int]]:
    """Every team's quotas per region: {team: {region: max hosts}}."""
    regional: dict[str, dict[str, int]] = {}
    with store.transaction() as session:
        for r in session.scalars(select(RegionQuota).order_by(RegionQuota.team)):
            regional.setdefault(r.team, {})[r.region] = r.max_hosts
    return regional


def lock_quotas(connection: Connection, team: str) -> tuple[int | None, dict[str, int]]:
    """Lock and read the team's quota rows: (overall or None, {region: max}).

    An ``UPDATE`` that changes nothing: a row lock on PostgreSQL, and on SQLite the
    database's write lock, taken before anything is read, so the check that follows
    cannot be raced by another allocation of the same team."""
    overall = connection.execute(_LOCK, {"t": team}).scalar()
    regional = connection.execute(_LOCK_REGIONS, {"t": team}).all()
    return overall, {str(region): int(n) for region, n in regional}


def locked_quotas(row: Any) -> tuple[int | None, dict[str, int]]:
    """What :data:`LOCKING_COLUMNS` read, as :func:`lock_quotas` returns it."""
    overall = row.quota_overall
    regional = row.quota_regions or {}
    return (None if overall is None else int(overall)), {
        str(region): int(n) for region, n in regional.items()
    }


def check_overall_quota(team: str, overall: int | None, count: int) -> None:
    """An experiment of ``count`` hosts never fits a team that may hold fewer at once."""
    if overall is not None and count > overall:
        raise HostsUnavailable(
            f"team {team!r} may hold {overall} hosts at once; this experiment "
            f"needs {count} (one per arm)",
            hint=f"raise it with `hairline lab quota {team} {count}`, or run fewer arms",
        )


def held_by_region(
    connection: Connection, team: str, experiment_id: int, now: float
) -> dict[str, int]:
    """The team's hosts held by its other experiments (leases running), per region."""
    params = {"t": team, "e_id": experiment_id, "now": now}
    rows = connection.execute(_HELD_BY_REGION, params).all()
    return {str(region): int(n) for region, n in rows}


def room_by_region(
    regions: Iterable[str],
    *,
    held: Mapping[str, int],
    overall: int | None,
    regional: Mapping[str, int],
    kept: int = 0,
) -> dict[str, int]:
    """How many more hosts the team may take in each of ``regions``: its region quota left
    where it has one, never more than its overall quota left; ``kept`` hosts the
    experiment holds already count against it."""
    left = UNLIMITED if overall is None else overall - sum(held.values())
    room = {}
    for region in regions:
        here = left
        if region in regional:
            here = min(here, regional[region] - held.get(region, 0))
        room[region] = here - kept
    return room


@dataclass(frozen=True)
class TeamUsage:
    """What fairness between teams needs: hosts held per team (counting each experiment a
    processor is taking towards its hosts as one), quotas, the pool's size."""

    held: dict[str, int]
    quotas: dict[str, int]
    pool: int
    # Teams with an experiment a processor is giving hosts to right now.
    allocating: frozenset[str] = frozenset()


def team_usage(
    store: Store,
    connection: Connection,
    now: float,
    *,
    teams: Iterable[str] = (),
    claimed_and_quotas: Iterable[tuple[str, str, int]] | None = None,
) -> TeamUsage:
    """Every team's hosts held (allocations whose lease runs, at most HELD_TTL_S old) and
    overall quota; the pool (enabled, healthy hosts of every backend) is counted only when
    one of ``teams`` has no quota, the one case that needs it. ``claimed_and_quotas``: the
    rows of :data:`CLAIMED_AND_QUOTAS_PARTS` when the caller read them already.

    An experiment claimed but not yet given its hosts counts as one host held: otherwise
    every processor polling at once would see the same team furthest below its share
    and claim only its experiments, which then wait on each other's quota lock."""
    cached = _held.get(store.url)
    if cached is None or time.monotonic() - cached[0] >= HELD_TTL_S:
        rows = connection.execute(_HELD, {"now": now}).all()
        cached = (time.monotonic(), {str(team): int(n) for team, n in rows})
        _held[store.url] = cached
    held = dict(cached[1])
    quotas: dict[str, int] = {}
    allocating: set[str] = set()
    if claimed_and_quotas is None:
        claimed_and_quotas = connection.execute(_CLAIMED_AND_QUOTAS, {"now": now}).all()
    for kind, team, n in claimed_and_quotas:
        if kind == "quota":
            quotas[str(team)] = int(n)
            continue
        held[str(team)] = held.get(str(team), 0) + int(n)
        if kind == "allocating":
            allocating.add(str(team))
    pool = 0
    if any(t not in quotas for t in teams):
        pool = int(connection.execute(_POOL).scalar() or 0)
    return TeamUsage(held=held, quotas=quotas, pool=pool, allocating=frozenset(allocating))


def count_held(store: Store, team: str, hosts: int) -> None:
    """Count this process's own allocation in its cached hosts held at once."""
    cached = _held.get(store.url)
    if cached is not None:
        cached[1][team] = cached[1].get(team, 0) + hosts
