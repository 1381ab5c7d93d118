"""Allocation of named hosts ([hosts] pin): each arm its first free host, renewed when
kept, busy or unhealthy hosts passed over, unknown names and small quotas refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_registry import experiment, register

from hairline.config import load_experiment
from hairline.errors import HostsUnavailable
from hairline.hosts.inventory import Allocation, Waiting, allocate, requirements_for
from hairline.hosts.quotas import set_quota
from hairline.hosts.registry import mark_unhealthy
from hairline.hosts.similar import Requirements
from hairline.store.db import Store
from hairline.tune.clusters import choose_clusters, pinned

EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"
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


def test_experiments_pinned_to_clusters_take_their_pairs_until_none_is_free(
    store: Store,
) -> None:
    for i in range(4):
        register(store, f"h{i}")
    clusters = choose_clusters(store, "svc", 2, seed=1)
    base = load_experiment(EXAMPLE / "experiment.toml")
    arm = base.arms[base.baseline_arm]
    two = base.model_copy(update={"arms": {"control": arm, "test": arm}, "baseline": "control"})
    exp = pinned(two, clusters, control_arm="control", test_arm="test")
    wants = requirements_for(exp, ["control", "test"], store=store, backend="ray")
    got = [give(store, experiment(store), wants) for _ in range(2)]
    # In arm order: the control arm on a control host, the test arm on a test host; two
    # experiments at once take both pairs.
    names = [a.names for a in got if isinstance(a, Allocation)]
    assert sorted(c for c, _ in names) == sorted(clusters.control)
    assert sorted(t for _, t in names) == sorted(clusters.test)
    third = give(store, experiment(store), wants)
    assert isinstance(third, Waiting) and "held by experiment" in third.reason
