"""Hosts of the ``ray`` backend in the inventory: registered by their agents, marked
unhealthy when they die mid-trial, disabled when their agent leaves; ``last_seen_at``
kept fresh by a foreground agent's heartbeat (:func:`mark_seen`).

A test machine joins with ``hairline agent start`` (:mod:`hairline.hosts.agent`), which
starts its Ray worker node and then calls :func:`register_host` for each host the node
carries. Registering is an upsert by name: a host that died (``healthy = False``, set by
:func:`mark_unhealthy` when its node was lost mid-trial) is healthy again only when its
agent registers it again, because only the agent knows the machine is back. The columns
that allocation matches on (region, server type, CPU arch and model, kernel, turbo) are
filled here from the probed facts; the full facts stay in the JSON column.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from sqlalchemy import select, update

from hairline.errors import ConfigError, HostsUnavailable
from hairline.hosts.facts import HostFacts
from hairline.store.db import Store
from hairline.store.models import Host

__all__ = [
    "RAY_BACKEND",
    "Registered",
    "disable_hosts",
    "mark_seen",
    "mark_unhealthy",
    "ray_hosts",
    "register_host",
]

RAY_BACKEND = "ray"


@dataclass(frozen=True)
class Registered:
    """A host as :func:`register_host` left it; ``revived`` when it had been unhealthy."""

    id: int
    name: str
    address: str
    revived: bool
    previous_note: str | None


def register_host(
    store: Store,
    *,
    name: str,
    address: str,
    cpus: Sequence[int],
    facts: HostFacts,
    region: str,
    server_type: str,
    clock: Callable[[], float] = time.time,
) -> Registered:
    """Add or refresh the host ``name`` of the ``ray`` backend: enabled, healthy, seen now.

    A host of another backend with the same name is refused: names are the inventory's
    key, and a local CPU set renamed by a remote agent would lose its allocations.
    """
    now = clock()
    columns = {
        "backend": RAY_BACKEND,
        "machine": facts.hostname,
        "cpus": ",".join(map(str, cpus)),
        "facts": json.dumps({**facts.as_dict(), "region": region, "server_type": server_type}),
        "enabled": True,
        "healthy": True,
        "health_note": None,
        "address": address,
        "region": region,
        "server_type": server_type,
        "cpu_arch": facts.arch,
        "cpu_model": facts.cpu_model,
        "kernel": facts.kernel,
        "turbo": facts.turbo,
        "last_seen_at": now,
    }
    with store.transaction() as session:
        row = session.scalar(select(Host).where(Host.name == name).with_for_update())
        if row is not None and row.backend != RAY_BACKEND:
            raise ConfigError(
                f"a {row.backend} host is already called {name!r}",
                hint="give this machine's host another name with `hairline agent start --name`",
            )
        revived = row is not None and not row.healthy
        previous = row.health_note if row is not None else None
        if row is None:
            row = Host(name=name, **columns)
            session.add(row)
        else:
            for key, value in columns.items():
                setattr(row, key, value)
        session.flush()
        return Registered(row.id, name, address, revived, previous if revived else None)


def mark_unhealthy(
    store: Store, host_id: int, reason: str, *, clock: Callable[[], float] = time.time
) -> None:
    """The host died mid-trial: no experiment is given it until its agent registers again.
    The note says why and when, for `hairline lab hosts`."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(clock()))
    with store.transaction() as session:
        row = session.get(Host, host_id)
        if row is not None:
            row.healthy = False
            row.health_note = f"{reason} (at {stamp}; healthy again when its agent registers)"


def mark_seen(store: Store, names: Sequence[str], *, clock: Callable[[], float] = time.time) -> int:
    """The agent of the hosts ``names`` is alive now (its heartbeat): their
    ``last_seen_at`` moves on; how many rows it found."""
    with store.transaction() as session:
        result = session.execute(
            update(Host)
            .where(Host.name.in_(list(names)), Host.backend == RAY_BACKEND)
            .values(last_seen_at=clock())
        )
        return int(result.rowcount)  # type: ignore[attr-defined]


def disable_hosts(
    store: Store,
    names: Sequence[str],
    *,
    force: bool = False,
    clock: Callable[[], float] = time.time,
) -> list[str]:
    """Take the hosts ``names`` out of the inventory (their agent is leaving); the names
    of those found.

    A host an experiment holds is not taken away unless ``force``: its trial would be cut
    short. With ``force`` it is disabled all the same, and the experiment re-runs that
    trial on another host when the node goes (as for a host that died).
    """
    now = clock()
    with store.transaction() as session:
        rows = session.scalars(
            select(Host).where(Host.name.in_(list(names))).order_by(Host.id).with_for_update()
        ).all()
        held = [
            r
            for r in rows
            if r.experiment_id is not None
            and r.lease_expires_at is not None
            and r.lease_expires_at >= now
        ]
        if held and not force:
            taken = ", ".join(f"{r.name} (experiment {r.experiment_id})" for r in held)
            raise HostsUnavailable(
                f"an experiment holds {taken}",
                hint="wait for it to finish (`hairline status`), or `hairline agent stop "
                "--force` to stop now: the experiment re-runs that trial on another host",
            )
        for row in rows:
            row.enabled = False
        return [r.name for r in rows]


def ray_hosts(store: Store) -> list[dict[str, object]]:
    """Every host of the ``ray`` backend: name, address, health and allocation."""
    with store.transaction() as session:
        return [
            {
                "name": h.name,
                "address": h.address,
                "cpus": h.cpus,
                "region": h.region,
                "server_type": h.server_type,
                "enabled": h.enabled,
                "healthy": h.healthy,
                "health_note": h.health_note,
                "experiment": h.experiment_id,
                "last_seen_at": h.last_seen_at,
            }
            for h in session.scalars(
                select(Host).where(Host.backend == RAY_BACKEND).order_by(Host.id)
            )
        ]
