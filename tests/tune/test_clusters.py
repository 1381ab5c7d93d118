"""Test and control clusters from the inventory (SQLite and PostgreSQL), and experiments
pinned to them: allocation gives each arm a host of its own cluster."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from hairline.config import ExperimentConfig, load_experiment
from hairline.errors import ConfigError, HostsUnavailable
from hairline.hosts.facts import HostFacts
from hairline.hosts.registry import register_host
from hairline.store.db import Store
from hairline.tune.clusters import Clusters, aa_between, choose_clusters, pinned

FACTS = HostFacts(
    hostname="m", cpu_model="Xeon 8375C", arch="x86_64", kernel="6.1.0-13", turbo="off",
    governor="performance", cores=16, memory_bytes=64 << 30, smt="off",
)  # fmt: skip
EXAMPLE = Path(__file__).parents[2] / "examples" / "sample-service"


def register(store: Store, name: str, **changes: object) -> None:
    facts = dataclasses.replace(FACTS, hostname=name, **changes)  # type: ignore[arg-type]
    register_host(store, name=name, address="10.0.0.1", cpus=(0,), facts=facts,
                  region="eu-1", server_type="R640")  # fmt: skip


def fleet(store: Store) -> None:
    """Eight alike hosts and three that differ: a CPU model, turbo on, half the memory."""
    for i in range(8):
        register(store, f"h{i}")
    register(store, "odd-cpu", cpu_model="EPYC 7R13")
    register(store, "odd-turbo", turbo="on")
    register(store, "odd-memory", memory_bytes=32 << 30)


def test_clusters_are_the_hosts_nearest_the_mean_split_by_seed(store: Store) -> None:
    fleet(store)
    clusters = choose_clusters(store, "svc", 4, seed=3)
    chosen = {*clusters.test, *clusters.control}
    assert chosen == {f"h{i}" for i in range(8)}
    assert len(clusters.test) == len(clusters.control) == 4
    # The alike hosts are alike in distance too: only the half-memory host moved the mean.
    assert set(clusters.distances) == chosen
    assert len(set(clusters.distances.values())) == 1 and max(clusters.distances.values()) < 1
    # Deterministic for a seed; another seed splits them otherwise.
    assert choose_clusters(store, "svc", 4, seed=3) == clusters
    assert any(choose_clusters(store, "svc", 4, seed=s).test != clusters.test for s in range(5))
    assert clusters.pairs == list(zip(clusters.control, clusters.test, strict=True))


def test_too_few_hosts_a_bad_size_and_the_local_backend_are_errors_that_say_why(
    store: Store,
) -> None:
    fleet(store)
    register(store, "other-kernel", kernel="6.8.0-1")
    with pytest.raises(HostsUnavailable) as caught:
        choose_clusters(store, "svc", 6, seed=0)
    # Eleven hosts of the class (twelve in all) cannot make two clusters of six.
    assert "need 12" in str(caught.value) and "there are 11 of one class" in str(caught.value)
    assert "among 12" in str(caught.value) and "hairline agent start" in str(caught.value)
    with pytest.raises(ConfigError, match="at least 1 host"):
        choose_clusters(store, "svc", 0, seed=0)
    with pytest.raises(HostsUnavailable, match="need the ray backend") as local:
        choose_clusters(store, "svc", 1, seed=0, backend="local")
    assert "--backend ray" in str(local.value)


def config() -> ExperimentConfig:
    base = load_experiment(EXAMPLE / "experiment.toml")
    arms = {"control": base.arms[base.baseline_arm],
            "test": base.arms[base.baseline_arm].model_copy(update={"args": ["--x"]})}  # fmt: skip
    return base.model_copy(update={"arms": arms, "baseline": "control"})


CLUSTERS = Clusters(test=("h1", "h2"), control=("h0", "h3"))


def test_pinned_puts_each_arm_on_its_cluster_and_a_pair_on_one_host_each() -> None:
    any_host = pinned(config(), CLUSTERS, control_arm="control", test_arm="test")
    assert any_host.hosts.pin == {"control": ["h0", "h3"], "test": ["h1", "h2"]}
    assert any_host.design.schedule == "pinned"
    second = pinned(config(), CLUSTERS, control_arm="control", test_arm="test", pair=1)
    assert second.hosts.pin == {"control": ["h3"], "test": ["h2"]}
    # A stored experiment reads back as it was written.
    assert ExperimentConfig.model_validate_json(second.model_dump_json()) == second
    with pytest.raises(ValueError, match="pairs 0 to 1"):
        pinned(config(), CLUSTERS, control_arm="control", test_arm="test", pair=2)
    with pytest.raises(ValueError, match="has \\['control', 'test'\\]"):
        pinned(config(), CLUSTERS, control_arm="control", test_arm="candidate")


def test_the_aa_between_the_clusters_runs_the_default_on_both() -> None:
    aa = aa_between(config(), CLUSTERS)
    assert aa.arms["test"].args == aa.arms["control"].args == config().arms["control"].args
    assert aa.hosts.pin == {"control": ["h0", "h3"], "test": ["h1", "h2"]}
