"""The host rows allocation reads and writes, as statements built once on the table.

Building SQLAlchemy expressions and running them through the ORM cost more Python time
than PostgreSQL spends on these statements, and a processor runs them on every
allocation: ``hosts/inventory.py`` decides, this module reads and writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    bindparam,
    func,
    or_,
    select,
    update,
)

from hairline.errors import HostsUnavailable
from hairline.hosts.quotas import LOCKING_COLUMNS, lock_quotas, locked_quotas
from hairline.hosts.similar import GROUP_FACTS, Group, Requirements
from hairline.store.models import Experiment, Host

__all__ = [
    "LOCAL_BACKEND",
    "RELEASE",
    "kept_hosts",
    "kept_hosts_locking_quotas",
    "local_classes_exist",
    "record_region",
    "release",
    "take_hosts",
]

LOCAL_BACKEND = "local"

_HOSTS = cast(Table, Host.__table__)
_H = _HOSTS.c
_EXPERIMENTS = cast(Table, Experiment.__table__)
_FREE_NOW = or_(_H.experiment_id.is_(None), _H.lease_expires_at.is_(None),
                _H.lease_expires_at < bindparam("now"))  # fmt: skip
# The experiment's recorded region and its hosts, one row per host (one row of NULL host
# columns when it holds none): one round trip.
_MINE = (
    select(_EXPERIMENTS.c.region.label("recorded_region"), _HOSTS)
    .select_from(_EXPERIMENTS.outerjoin(_HOSTS, _H.experiment_id == _EXPERIMENTS.c.id))
    .where(_EXPERIMENTS.c.id == bindparam("e_id"))
    .order_by(_H.id)
)
_MINE_LOCKING = _MINE.add_columns(*LOCKING_COLUMNS)
_NOBODY = {"experiment_id": None, "team": None, "allocated_at": None, "lease_expires_at": None}
_GIVE_BACK = update(_HOSTS).where(_H.id.in_(bindparam("ids", expanding=True))).values(_NOBODY)
# Every host of experiment ``e_id`` given back (public: ``lab/queue.py`` runs it as part
# of the statement that ends the experiment).
RELEASE = update(_HOSTS).where(_H.experiment_id == bindparam("e_id")).values(_NOBODY)
_RENEW = (
    update(_HOSTS)
    .where(_H.id.in_(bindparam("ids", expanding=True)))
    .values(lease_expires_at=bindparam("until"))
)
_SET_REGION = (
    update(_EXPERIMENTS)
    .where(_EXPERIMENTS.c.id == bindparam("e_id"), _EXPERIMENTS.c.region.is_(None))
    .values(region=bindparam("r"))
)


def _take_statement(local: bool) -> Any:
    """Take ``n`` free hosts of one group in one statement, returning them; the candidates
    are locked skipping those another allocation locks (``FOR UPDATE SKIP LOCKED`` on
    PostgreSQL; SQLite's single writer serialises allocations anyway)."""
    pick = select(_H.id).where(
        _H.backend == bindparam("h_backend"),
        _H.enabled.is_(True),
        _H.healthy.is_(True),
        _FREE_NOW,
        *(_H[f] == bindparam(f"g_{f}") for f in GROUP_FACTS),
    )
    if local:
        pick = pick.where(_H.machine == bindparam("h_machine"))
    pick = pick.order_by(_H.id).limit(bindparam("n")).with_for_update(skip_locked=True)
    return (
        update(_HOSTS)
        .where(_H.id.in_(pick.scalar_subquery()), _FREE_NOW)
        .values(experiment_id=bindparam("e_id"), team=bindparam("e_team"),
                allocated_at=bindparam("now"), lease_expires_at=bindparam("until"))
        .returning(*_HOSTS.c)
    )  # fmt: skip


_TAKE = {True: _take_statement(local=True), False: _take_statement(local=False)}
# The first take of an experiment's first allocation also records its region; on
# PostgreSQL as a data-modifying CTE of that take, one round trip fewer.
_TAKE_RECORDING = {
    local: take.add_cte(_SET_REGION.cte("recorded")) for local, take in _TAKE.items()
}


def record_region(connection: Connection, experiment_id: int, region: str) -> None:
    """Record the region of the experiment's first allocation (once)."""
    connection.execute(_SET_REGION, {"e_id": experiment_id, "r": region})


def release(connection: Connection, experiment_id: int) -> None:
    """Give every host of the experiment back."""
    connection.execute(RELEASE, {"e_id": experiment_id})


def kept_hosts(
    connection: Connection,
    experiment_id: int,
    backend: str,
    count: int,
    now: float,
    lease_s: float,
) -> tuple[list[Any], str | None]:
    """The experiment's hosts (rows) that can go on serving it, their leases renewed, the
    others (dead, disabled) given back; and the region its first allocation chose, if any."""
    rows = connection.execute(_MINE, {"e_id": experiment_id}).all()
    return _keep(connection, rows, backend, count, now, lease_s)


def kept_hosts_locking_quotas(
    connection: Connection,
    experiment_id: int,
    team: str,
    backend: str,
    count: int,
    now: float,
    lease_s: float,
) -> tuple[list[Any], str | None, int | None, dict[str, int]]:
    """:func:`kept_hosts`, then the team's quotas locked and read (``lock_quotas``): on
    PostgreSQL the lock rides on the read of the experiment's hosts, one round trip."""
    if connection.dialect.name != "postgresql":
        kept, recorded = kept_hosts(connection, experiment_id, backend, count, now, lease_s)
        return kept, recorded, *lock_quotas(connection, team)
    rows = connection.execute(_MINE_LOCKING, {"e_id": experiment_id, "t": team}).all()
    # No row: no such experiment (the lock is held all the same; read the quotas alone).
    overall, regional = locked_quotas(rows[0]) if rows else lock_quotas(connection, team)
    kept, recorded = _keep(connection, rows, backend, count, now, lease_s)
    return kept, recorded, overall, regional


def _keep(
    connection: Connection,
    rows: Sequence[Any],
    backend: str,
    count: int,
    now: float,
    lease_s: float,
) -> tuple[list[Any], str | None]:
    recorded = None if not rows or rows[0].recorded_region is None else str(rows[0].recorded_region)
    mine = [h for h in rows if h.id is not None]
    kept = [h for h in mine if h.enabled and h.healthy and h.backend == backend][:count]
    gone = [h.id for h in mine if h not in kept]
    if gone:
        connection.execute(_GIVE_BACK, {"ids": gone})
    if kept:
        connection.execute(_RENEW, {"ids": [h.id for h in kept], "until": now + lease_s})
    return kept, recorded


def local_classes_exist(
    connection: Connection, requirements: Requirements, *, enabled: Sequence[ColumnElement[bool]]
) -> None:
    """Hardware mode on this machine's CPU sets: every arm's class must be here, or the
    experiment would wait for hosts that can never come."""
    for facts in requirements.arms:
        found = connection.scalar(
            select(func.count())
            .select_from(Host)
            .where(*enabled, *(getattr(Host, k) == v for k, v in facts.items()))
        )
        if not found:
            wanted = ", ".join(f"{k} {v!r}" for k, v in facts.items())
            raise HostsUnavailable(
                f"no host of this machine has {wanted}; hardware mode compares machines",
                hint="run it on test machines of each class (docs/scale-out.md), or name "
                "facts this machine has ([arms.X] hosts; `hairline lab hosts` lists them)",
            )


def take_hosts(
    connection: Connection,
    slots: Sequence[Group],
    backend: str,
    machine: str,
    experiment_id: int,
    team: str,
    now: float,
    lease_s: float,
    *,
    region_to_record: str | None = None,
) -> list[Any] | None:
    """Take the chosen groups' hosts (rows), one statement per group, and record
    ``region_to_record`` as the experiment's region (:func:`record_region`); None if others
    took them first (the caller rolls the transaction back, so none stay taken)."""
    wanted: dict[Group, int] = {}
    for group in slots:
        wanted[group] = wanted.get(group, 0) + 1
    local = backend == LOCAL_BACKEND
    recording = region_to_record is not None and connection.dialect.name == "postgresql"
    base = {"h_backend": backend, "now": now, "h_machine": machine, "e_id": experiment_id,
            "e_team": team, "until": now + lease_s, "r": region_to_record}  # fmt: skip
    rows: list[Any] = []
    for group, n in wanted.items():
        take = _TAKE_RECORDING[local] if recording and not rows else _TAKE[local]
        params = {**base, "n": n, **{f"g_{f}": group.fact(f) for f in GROUP_FACTS}}
        found = connection.execute(take, params).all()
        if len(found) < n:
            return None
        rows.extend(found)
    if region_to_record is not None and not recording:
        record_region(connection, experiment_id, region_to_record)
    return rows
