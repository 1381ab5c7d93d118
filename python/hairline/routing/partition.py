"""Endpoints clustered into partitions by the code they run (HHVM section 2.2), and the
number of partitions chosen from the working-set curve. Pure.

The bipartite graph of endpoints and functions is co-clustered with scikit-learn's
``SpectralCoclustering`` (Dhillon's normalised cut of a bipartite graph). Each endpoint's
row holds its functions' shares of its cost, so a busy endpoint does not outweigh the others
in the cut: which partition an endpoint belongs to depends on what code it runs, and how
many hosts a partition needs is the balancer's business (routing/balancer.py).

A partition's working set is the code a host serving it has to keep hot: the functions that
make up :data:`COVERAGE` (99.5%) of its endpoints' cost. A function an endpoint calls once
in a thousand requests misses the cache when it runs but does not hold a slot; counting it
would let a profile's rare calls, which every real one has, blur the curve that K is read
from. The paper chose K where "the average working set size starts decreasing
very slowly" as K grows; :func:`choose_k` makes that a rule (its docstring).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from typing_extensions import TypedDict

from hairline.errors import DataError
from hairline.kit.jsonout import documented
from hairline.routing.profile import Profile

__all__ = [
    "COVERAGE",
    "Partition",
    "PartitionJson",
    "Partitioning",
    "PartitioningJson",
    "choose_k",
    "partition",
    "partitioning_from_json",
    "partitioning_json",
]


COVERAGE = 0.995


@dataclass(frozen=True)
class Partition:
    """One partition: its endpoints, the functions they run, and their cost in the profile
    (the load it brings, in the profile's unit)."""

    name: str
    endpoints: tuple[str, ...]
    functions: tuple[str, ...]
    cost: float

    @property
    def working_set(self) -> int:
        return len(self.functions)


@dataclass(frozen=True)
class Partitioning:
    """Partitions, busiest first (``p0`` is the busiest)."""

    partitions: tuple[Partition, ...]

    @property
    def assignment(self) -> dict[str, str]:
        """Endpoint -> the name of its partition."""
        return {e: p.name for p in self.partitions for e in p.endpoints}

    @property
    def average_working_set(self) -> float:
        return float(np.mean([p.working_set for p in self.partitions]))

    @property
    def load_shares(self) -> dict[str, float]:
        """Partition -> its share of the profile's cost (equal shares if it cost nothing)."""
        total = sum(p.cost for p in self.partitions)
        if total <= 0:
            return {p.name: 1.0 / len(self.partitions) for p in self.partitions}
        return {p.name: p.cost / total for p in self.partitions}


def partition(profile: Profile, k: int, *, seed: int = 0) -> Partitioning:
    """``profile``'s endpoints in (at most) ``k`` partitions. Fewer come back when the
    co-clustering leaves a cluster without endpoints (there is no k-th kind of code)."""
    endpoints = sorted(profile.endpoints)
    if not 1 <= k <= len(endpoints):
        raise DataError(
            f"cannot make {k} partitions of {len(endpoints)} endpoints",
            hint=f"pass --k between 1 and {len(endpoints)}, or --k auto",
        )
    functions = profile.functions
    labels = _cluster(profile, endpoints, functions, k, seed)
    return _partitioning(profile, endpoints, labels)


def choose_k(
    profile: Profile, k_max: int, *, seed: int = 0, gain: float = 0.25
) -> tuple[int, tuple[float, ...]]:
    """The number of partitions, and the curve it was read from (``curve[k - 1]`` is the
    average working set of :func:`partition` with ``k``).

    The working set cannot fall below the floor of one endpoint per partition (the mean of
    the endpoints' own working sets); what lies above it is what partitioning can save.
    K is the smallest k whose next partition saves less than ``gain`` of what is left to
    save. While k is below the number G of kinds of code, a split separates code that has
    nothing in common. In the sample service's model (groups of 12 functions, each endpoint
    running 8 of its group's and 2 common ones) it saves ``12G / ((k+1)(12G - 8k))`` of the
    excess, at least 0.3 for G <= 8; past G it cuts a group whose endpoints share most of
    their code, and saves a few percent.
    """
    ks = range(1, min(k_max, len(profile.endpoints)) + 1)
    curve = tuple(partition(profile, k, seed=seed).average_working_set for k in ks)
    floor = float(np.mean([len(_hot([costs])) for costs in profile.endpoints.values()]))
    for k in ks[:-1]:
        excess = curve[k - 1] - floor
        if excess <= 1e-9 or curve[k - 1] - curve[k] < gain * excess:
            return k, curve
    return ks[-1], curve


def _cluster(
    profile: Profile, endpoints: list[str], functions: tuple[str, ...], k: int, seed: int
) -> list[int]:
    column = {f: j for j, f in enumerate(functions)}
    matrix = np.zeros((len(endpoints), len(functions)))
    for i, endpoint in enumerate(endpoints):
        for function, cost in profile.endpoints[endpoint].items():
            matrix[i, column[function]] = cost
    totals = matrix.sum(axis=1)
    # An endpoint that ran no code is placed afterwards with the smallest partition.
    rows = np.flatnonzero(totals > 0)
    labels = [-1] * len(endpoints)
    if k == 1 or len(rows) <= 1:
        return [0] * len(endpoints)
    shares = matrix[rows] / totals[rows, None]
    shares = shares[:, shares.sum(axis=0) > 0]
    k_fit = min(k, len(rows), shares.shape[1])
    if k_fit == 1:
        found = np.zeros(len(rows), dtype=int)
    else:
        from sklearn.cluster import SpectralCoclustering

        model = SpectralCoclustering(n_clusters=k_fit, random_state=seed, n_init=10)
        with warnings.catch_warnings():
            # Duplicate points in the embedding (identical endpoints) make k-means warn.
            warnings.simplefilter("ignore")
            model.fit(shares)
        found = np.asarray(model.row_labels_, dtype=int)
    for row, label in zip(rows, found, strict=True):
        labels[int(row)] = int(label)
    if -1 in labels:
        used = [label for label in labels if label >= 0]
        smallest = min(set(used), key=used.count)
        labels = [smallest if label < 0 else label for label in labels]
    return labels


def _partitioning(profile: Profile, endpoints: list[str], labels: list[int]) -> Partitioning:
    groups: dict[int, list[str]] = {}
    for endpoint, label in zip(endpoints, labels, strict=True):
        groups.setdefault(label, []).append(endpoint)
    made = []
    for members in groups.values():
        functions = _hot([profile.endpoints[e] for e in members])
        cost = sum(profile.cost(e) for e in members)
        made.append((members, functions, cost))
    made.sort(key=lambda m: (-m[2], m[0][0]))
    return Partitioning(
        tuple(
            Partition(f"p{i}", tuple(members), tuple(functions), cost)
            for i, (members, functions, cost) in enumerate(made)
        )
    )


def _hot(costs: list[Mapping[str, float]]) -> list[str]:
    """The working set of endpoints with these costs: the functions that make up
    :data:`COVERAGE` of their cost, sorted by name."""
    total: dict[str, float] = {}
    for one in costs:
        for function, cost in one.items():
            total[function] = total.get(function, 0.0) + cost
    ranked = sorted(total.items(), key=lambda fc: (-fc[1], fc[0]))
    budget = COVERAGE * sum(total.values())
    kept: list[str] = []
    running = 0.0
    for function, cost in ranked:
        if cost <= 0 or (running >= budget and kept):
            break
        kept.append(function)
        running += cost
    return sorted(kept)


@documented
class PartitionJson(TypedDict):
    """One partition: its endpoints and the code they run."""

    name: str
    """p0, p1, ...: p0 is the busiest. It names an HAProxy backend."""
    endpoints: list[str]
    working_set: int
    """The functions that make up 99.5% of its endpoints' cost."""
    load_share: float
    """Its share of the profile's cost."""
    functions: list[str]


@documented
class PartitioningJson(TypedDict):
    """A partitions file (``hairline route partition --output FILE`` or ``--json``;
    docs/routing.md); ``hairline route fleet --partitions FILE`` reads it back."""

    partitions: list[PartitionJson]
    average_working_set: float
    curve: list[float]
    """With ``--k auto``: the average working set for K = 1, 2, ... it was read from
    (empty otherwise)."""


def partitioning_json(
    partitioning: Partitioning, *, curve: tuple[float, ...] = ()
) -> PartitioningJson:
    """The partitions file's content (``hairline route partition --output``)."""
    shares = partitioning.load_shares
    return {
        "partitions": [
            {
                "name": p.name,
                "endpoints": list(p.endpoints),
                "working_set": p.working_set,
                "load_share": round(shares[p.name], 6),
                "functions": list(p.functions),
            }
            for p in partitioning.partitions
        ],
        "average_working_set": partitioning.average_working_set,
        "curve": list(curve),
    }


def partitioning_from_json(data: Any, *, source: str) -> Partitioning:
    """A partitions file's content back (the costs are the load shares)."""
    fix = (
        'write {"partitions": [{"name": "p0", "endpoints": ["/api/op/0", ...]}, ...]}, '
        "as `hairline route partition PROFILE --output FILE` does"
    )
    items = data.get("partitions") if isinstance(data, Mapping) else None
    if not isinstance(items, list) or not items:
        raise DataError(f'{source}: no "partitions" list', hint=fix)
    made: list[Partition] = []
    seen: dict[str, str] = {}
    for index, item in enumerate(items):
        where = f"{source}: partitions[{index}]"
        if not isinstance(item, Mapping):
            raise DataError(f"{where} is not an object", hint=fix)
        name = item.get("name", f"p{index}")
        endpoints = item.get("endpoints")
        if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
            raise DataError(
                f"{where}.name {name!r} is not a name",
                hint="use letters, digits, '-' and '_' (it names an HAProxy backend)",
            )
        if not isinstance(endpoints, list) or not endpoints:
            raise DataError(f"{where}.endpoints is missing or empty", hint=fix)
        for endpoint in endpoints:
            if not isinstance(endpoint, str) or not endpoint.startswith("/") or " " in endpoint:
                raise DataError(
                    f"{where}.endpoints: {endpoint!r} is not a path",
                    hint="an endpoint is a request path without spaces, e.g. /api/op/3",
                )
            if endpoint in seen:
                raise DataError(
                    f"{where}.endpoints: {endpoint} is also in partition {seen[endpoint]}",
                    hint="each endpoint belongs to one partition; remove it from one of them",
                )
            seen[endpoint] = name
        share = item.get("load_share", 1.0)
        if not isinstance(share, int | float) or not math.isfinite(share) or share < 0:
            raise DataError(f"{where}.load_share {share!r} is not a share", hint="write 0..1")
        functions = item.get("functions", [])
        made.append(Partition(name, tuple(endpoints), tuple(map(str, functions)), float(share)))
    if len({p.name for p in made}) != len(made):
        raise DataError(f"{source}: two partitions share a name", hint="name each one apart")
    return Partitioning(tuple(made))
