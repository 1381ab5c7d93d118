"""The host inventory as ``hairline lab hosts --json`` lists it: every host with its class,
health, facts and allocation, and the teams' quotas, typed (docs/schema/hosts.json)."""

from __future__ import annotations

import json

from sqlalchemy import select
from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.store.db import Store
from hairline.store.models import Host, Quota

__all__ = ["HostRowJson", "HostsJson", "inventory"]


@documented
class HostRowJson(TypedDict):
    """One host of the inventory."""

    name: str
    backend: str
    """"local" (a CPU set of this machine) or "ray" (a test machine that joined)."""
    address: str | None
    """Where its arms are reached: the Ray node's IP address (null for local CPU sets)."""
    cpus: str
    """Its CPUs, e.g. "2,3"."""
    enabled: bool
    healthy: bool
    health_note: str | None
    """Why it is unhealthy."""
    region: str
    server_type: str
    cpu_arch: str
    cpu_model: str
    kernel: str
    turbo: str
    experiment: int | None
    """The experiment it is allocated to."""
    team: str | None
    """That experiment's team."""
    facts: dict[str, object]
    """Every fact probed on it."""


@documented
class HostsJson(TypedDict):
    """The inventory (``hairline lab hosts --json``; docs/hosts.md)."""

    hosts: list[HostRowJson]
    engine_cpus: tuple[int, ...]
    """The CPUs left to the load generator on this machine."""
    quotas: dict[str, int]
    """Each team's most hosts at once."""
    region_quotas: dict[str, dict[str, int]]
    """Each team's most hosts at once per region."""


def inventory(store: Store) -> tuple[list[HostRowJson], dict[str, int]]:
    """Every host with its class, health, facts and allocation, and every team's quota."""
    with store.transaction() as session:
        rows: list[HostRowJson] = [
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
