"""The ray backend's hosts in the inventory: registered by their agent, unhealthy after a
death until registered again, disabled when the agent leaves (not while an experiment
holds them, unless forced); on SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from hairline.errors import ConfigError, HostsUnavailable
from hairline.hosts.facts import HostFacts
from hairline.hosts.inventory import Allocation, allocate, ensure_local_hosts
from hairline.hosts.registry import (
    disable_hosts,
    mark_seen,
    mark_unhealthy,
    ray_hosts,
    register_host,
)
from hairline.store.db import Store
from hairline.store.models import Experiment, Host, Service

FACTS = HostFacts(
    hostname="test-7", cpu_model="Example CPU @ 2.0GHz", arch="x86_64", kernel="6.1.0-13",
    turbo="off", governor="performance", cores=16, memory_bytes=64 << 30, smt="off",
)  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def register(store: Store, name: str, address: str = "10.0.0.7", **extra: object) -> int:
    return register_host(
        store, name=name, address=address, cpus=(2, 3), facts=FACTS, region="eu-1",
        server_type="R640", clock=extra.pop("clock", Clock()),  # type: ignore[arg-type]
    ).id  # fmt: skip


def experiment(store: Store) -> int:
    with store.transaction() as session:
        service = session.scalar(select(Service).where(Service.name == "svc"))
        if service is None:
            service = Service(name="svc", created_at=0.0)
            session.add(service)
            session.flush()
        row = Experiment(
            service_id=service.id, kind="ab", team="t", phase="allocating", spec="{}",
            source_file="x", artifacts_dir="x", created_at=0.0, updated_at=0.0,
        )  # fmt: skip
        session.add(row)
        session.flush()
        return row.id


def test_a_registered_host_has_its_facts_as_columns_and_json(store: Store) -> None:
    register(store, "test-7")
    with store.transaction() as session:
        host = session.scalars(select(Host)).one()
    assert (host.backend, host.address, host.cpus) == ("ray", "10.0.0.7", "2,3")
    assert host.machine == "test-7"
    assert (host.region, host.server_type, host.cpu_arch, host.kernel, host.turbo) == (
        "eu-1", "R640", "x86_64", "6.1.0-13", "off",
    )  # fmt: skip
    assert host.cpu_model == "Example CPU @ 2.0GHz" and host.healthy and host.enabled
    assert host.last_seen_at == 1_000.0
    facts = json.loads(host.facts)
    assert facts["kernel"] == "6.1.0-13" and facts["region"] == "eu-1"


def test_a_host_that_died_is_never_allocated_until_its_agent_registers_it_again(
    store: Store,
) -> None:
    clock = Clock()
    dead = register(store, "a", "10.0.0.1")
    register(store, "b", "10.0.0.2")
    mark_unhealthy(store, dead, "NodeDiedError: raylet gone", clock=clock)
    [row] = [h for h in ray_hosts(store) if h["name"] == "a"]
    assert row["healthy"] is False
    assert "NodeDiedError: raylet gone" in str(row["health_note"])
    assert "1970-01-01 00:16:40 UTC" in str(row["health_note"])
    first = experiment(store)
    got = allocate(store, first, "t", 1, lease_s=30, clock=clock, backend="ray")
    assert isinstance(got, Allocation) and got.names == ("b",)
    assert got.addresses == ("10.0.0.2",)

    again = register_host(
        store, name="a", address="10.0.0.9", cpus=(2, 3), facts=FACTS, region="eu-1",
        server_type="R640", clock=clock,
    )  # fmt: skip
    assert again.revived and "raylet gone" in str(again.previous_note)
    [row] = [h for h in ray_hosts(store) if h["name"] == "a"]
    assert row["healthy"] is True and row["health_note"] is None and row["address"] == "10.0.0.9"
    second = experiment(store)
    got = allocate(store, second, "t", 1, lease_s=30, clock=clock, backend="ray")
    assert isinstance(got, Allocation) and got.names == ("a",)


def test_a_local_cpu_set_name_cannot_be_taken_by_an_agent(store: Store) -> None:
    ensure_local_hosts(store, cpus_per_host=1)
    with store.transaction() as session:
        local = session.scalars(select(Host.name).where(Host.backend == "local")).first()
    assert local is not None
    with pytest.raises(ConfigError, match="already called") as caught:
        register(store, local)
    assert "--name" in str(caught.value.hint)


def test_an_agent_leaving_disables_its_hosts_but_not_while_an_experiment_holds_one(
    store: Store,
) -> None:
    clock = Clock()
    register(store, "a", "10.0.0.1")
    register(store, "b", "10.0.0.2")
    held = experiment(store)
    got = allocate(store, held, "t", 1, lease_s=30, clock=clock, backend="ray")
    assert isinstance(got, Allocation)
    [taken] = got.names
    with pytest.raises(HostsUnavailable, match=f"experiment {held}") as caught:
        disable_hosts(store, [taken], clock=clock)
    assert "--force" in str(caught.value.hint)
    assert disable_hosts(store, ["a", "b"], force=True, clock=clock) == ["a", "b"]
    assert [h["enabled"] for h in ray_hosts(store)] == [False, False]


def test_a_lapsed_allocation_does_not_keep_an_agent_from_leaving(store: Store) -> None:
    clock = Clock()
    register(store, "a")
    got = allocate(store, experiment(store), "t", 1, lease_s=30, clock=clock, backend="ray")
    assert isinstance(got, Allocation)
    clock.now += 60
    assert disable_hosts(store, ["a"], clock=clock) == ["a"]


def test_a_foreground_agents_heartbeat_moves_its_hosts_last_seen_on(store: Store) -> None:
    clock = Clock()
    register(store, "m1", clock=clock)
    register(store, "m2", clock=clock)
    clock.now = 1_030.0
    assert mark_seen(store, ["m1", "gone"], clock=clock) == 1
    seen = {h["name"]: h["last_seen_at"] for h in ray_hosts(store)}
    assert seen == {"m1": 1_030.0, "m2": 1_000.0}
