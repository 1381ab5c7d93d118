"""Allocation of named hosts ([hosts] pin): each arm its first free host, renewed when
kept, busy or unhealthy hosts passed over, unknown names and small quotas refused."""

from __future__ import annotations

import pytest
from test_registry import experiment, register

from hairline.errors import HostsUnavailable
from hairline.hosts.inventory import Allocation, Waiting, allocate
from hairline.hosts.quotas import set_quota
from hairline.hosts.registry import mark_unhealthy
from hairline.hosts.similar import Requirements
from hairline.store.db import Store

PIN = Requirements(names=(("c1", "c2"), ("t1", "t2")))


def give(store: Store, eid: int, requirements: Requirements = PIN) -> Allocation | Waiting:
    return allocate(store, eid, "t", 2, lease_s=60, backend="ray", requirements=requirements)


def test_each_arm_gets_its_first_free_host_and_keeps_it(store: Store) -> None:
    ids = {name: register(store, name) for name in ("c1", "c2", "t1", "t2")}
    mark_unhealthy(store, ids["t1"], "lost")
    first = experiment(store)
    got = give(store, first)
    assert isinstance(got, Allocation) and got.names == ("c1", "t2")
    # Asked again (a processor taking over), the experiment keeps its hosts.
    again = give(store, first)
    assert isinstance(again, Allocation) and again.names == ("c1", "t2")
    second = give(store, experiment(store))
    assert isinstance(second, Waiting)
    assert "t1 (unhealthy)" in second.reason and "t2 (held by experiment" in second.reason


def test_unknown_names_and_a_quota_too_small_are_errors(store: Store) -> None:
    for name in ("c1", "c2", "t1", "t2"):
        register(store, name)
    with pytest.raises(HostsUnavailable, match="'t9', not hosts of the ray backend"):
        give(store, experiment(store), Requirements(names=(("c1",), ("t9",))))
    set_quota(store, "t", 1)
    with pytest.raises(HostsUnavailable, match="may hold 1 hosts at once"):
        give(store, experiment(store))
