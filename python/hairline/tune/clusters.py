"""Test and control clusters of an autotuning run (HHVM autotuning section 5.1).

Before tuning, the 2N hosts nearest the population mean on their facts and their recent
A/A behaviour are chosen (tune/closeness.py) and split at random into a test cluster and a
control cluster; an A/A between the two (:func:`aa_between`) must pass before any
candidate is judged. Every evaluation is then an experiment with the control arm (the
default configuration) on a control host and the test arm (the candidate) on a test
host, for every batch (:func:`pinned`): ``[hosts] pin`` names the hosts, allocation takes
them (hosts/pinning.py), and the pinned design keeps each arm on its host.

One experiment takes one host per arm. A batch of q candidates runs as q experiments:
``pinned(..., pair=i)`` puts candidate i on pair i (control[i], test[i]); without
``pair`` an experiment may take any free host of each cluster.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select

from hairline.config import ExperimentConfig
from hairline.errors import ConfigError, HostsUnavailable
from hairline.hosts.registry import RAY_BACKEND
from hairline.hosts.runs import DEFAULT_METRIC, load_runs
from hairline.hosts.similar import CLASS_FACTS
from hairline.store.db import Store
from hairline.store.models import Host
from hairline.tune.closeness import Candidate, aa_behaviour, distances, nearest, split

__all__ = ["Clusters", "aa_between", "choose_clusters", "pinned"]

# Facts compared as labels (the class, CLASS_FACTS, is shared by every chosen host).
LABELS = ("cpu_model", "turbo", "governor", "smt")
# Facts compared as numbers (hosts.facts.HostFacts; 0 means unknown there).
NUMBERS = ("cores", "memory_bytes")


@dataclass(frozen=True)
class Clusters:
    """The test and control hosts (names as in the hosts table), and each chosen host's
    largest normalised difference from the population."""

    test: tuple[str, ...]
    control: tuple[str, ...]
    distances: dict[str, float] = field(default_factory=dict)

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """(control host, test host) per pair, for parallel evaluations."""
        return list(zip(self.control, self.test, strict=True))


def choose_clusters(
    store: Store,
    service: str,
    size: int,
    *,
    seed: int,
    backend: str = RAY_BACKEND,
    metric: str = DEFAULT_METRIC,
    min_runs: int = 3,
) -> Clusters:
    """Clusters of ``size`` hosts each from the enabled, healthy hosts of the largest
    class (region, server type, CPU arch, kernel), the 2 x ``size`` nearest the mean of
    that class on their facts and on ``service``'s past A/A runs of ``metric``, split at
    random by ``seed``."""
    if size < 1:
        raise ConfigError(
            f"a cluster of {size} hosts",
            hint="test and control clusters need at least 1 host each: make the cluster "
            "size 1 or more",
        )
    if backend != RAY_BACKEND:
        raise HostsUnavailable(
            f"test and control clusters need the {RAY_BACKEND} backend, not {backend!r}",
            hint="this machine's CPU sets are one machine, not a population to choose from: "
            "run with --backend ray on test machines that joined with `hairline agent "
            "start` (docs/scale-out.md)",
        )
    population = _largest_class(store, 2 * size)
    runs, _ = load_runs(store, metric=metric, service=service, kinds=("aa",))
    behaviour = aa_behaviour(runs, min_runs=min_runs)
    candidates = [_candidate(host, behaviour.get(host.name, {})) for host in population]
    distance = distances(candidates)
    chosen = nearest(distance, 2 * size)
    test, control = split(chosen, size, seed=seed)
    return Clusters(test=test, control=control, distances={n: distance[n] for n in chosen})


def _largest_class(store: Store, needed: int) -> list[Any]:
    """The usable hosts of the class with the most of them, or an error saying how many
    there are."""
    with store.transaction() as session:
        rows = session.scalars(
            select(Host)
            .where(Host.backend == RAY_BACKEND, Host.enabled.is_(True), Host.healthy.is_(True))
            .order_by(Host.name)
        ).all()
        session.expunge_all()
    classes: dict[tuple[str, ...], list[Any]] = {}
    for row in rows:
        classes.setdefault(tuple(str(getattr(row, f)) for f in CLASS_FACTS), []).append(row)
    if classes:
        key = min(classes, key=lambda k: (-len(classes[k]), k))
        if len(classes[key]) >= needed:
            return classes[key]
        described = ", ".join(f"{f} {v}" for f, v in zip(CLASS_FACTS, key, strict=True))
        have = f"{len(classes[key])} of one class ({described}) among {len(rows)}"
    else:
        have = "none"
    raise HostsUnavailable(
        f"test and control clusters of {needed // 2} need {needed} enabled, healthy "
        f"{RAY_BACKEND} hosts of one class; there are {have}",
        hint="join more test machines with `hairline agent start` (`hairline lab hosts` "
        "lists them), or make the clusters smaller",
    )


def _candidate(host: Any, behaviour: Mapping[str, float]) -> Candidate:
    facts: dict[str, Any] = json.loads(host.facts or "{}")
    labels = {name: str(facts.get(name, getattr(host, name, "unknown"))) for name in LABELS}
    numbers: dict[str, float | None] = {}
    for name in NUMBERS:
        value = float(facts.get(name) or 0)
        numbers[name] = value if value > 0 else None
    numbers.update(behaviour)
    return Candidate(name=str(host.name), numbers=numbers, labels=labels)


def pinned(
    config: ExperimentConfig,
    clusters: Clusters,
    *,
    control_arm: str,
    test_arm: str,
    pair: int | None = None,
) -> ExperimentConfig:
    """``config`` with ``control_arm`` on a control host and ``test_arm`` on a test host
    in every batch, no swap: on pair ``pair`` (control[pair], test[pair]), or on any free
    host of each cluster when None."""
    arms = set(config.arms)
    if arms != {control_arm, test_arm} or control_arm == test_arm:
        raise ValueError(
            f"pin arms {control_arm!r} and {test_arm!r}, but the experiment has {sorted(arms)}"
        )
    if config.design.mode == "hardware":
        raise ValueError("a hardware-mode experiment chooses its hosts by class; pin none")
    if pair is None:
        control, test = list(clusters.control), list(clusters.test)
    elif 0 <= pair < len(clusters.pairs):
        control, test = [clusters.control[pair]], [clusters.test[pair]]
    else:
        raise ValueError(f"pair {pair}: the clusters have pairs 0 to {len(clusters.pairs) - 1}")
    hosts = config.hosts.model_copy(update={"pin": {control_arm: control, test_arm: test}})
    design = config.design.model_copy(update={"name": "pinned"})
    return config.model_copy(update={"hosts": hosts, "design": design})


def aa_between(
    config: ExperimentConfig,
    clusters: Clusters,
    *,
    control_arm: str | None = None,
    test_arm: str | None = None,
    pair: int | None = None,
) -> ExperimentConfig:
    """An A/A of the pinned pair: both arms run ``control_arm`` (default: the baseline),
    each on its cluster's host. Any difference its verdict finds is the clusters' own:
    tuning on them would be biased (HHVM: "repeat the server selection")."""
    control = control_arm or config.baseline_arm
    others = [name for name in config.arms if name != control]
    test = test_arm or (others[0] if len(others) == 1 else "")
    aa = config.model_copy(update={"baseline": control}).as_aa()
    return pinned(aa, clusters, control_arm=control, test_arm=test, pair=pair)
