"""How far each host is from its population, and the random split into two clusters
(HHVM autotuning section 5.1), pure.

"For each server, we calculate the difference between its measured metrics and the
population's average metrics. We then determine the maximum difference across all
metrics. We sort servers by their maximum difference and select the 2N that are closest
to the mean. Finally, the procedure randomly splits these servers into two sets."

A feature is a number (cores, memory, the host's level and spread in past A/A runs) or a
label (CPU model, turbo, governor, SMT). A number's difference is ``|x - mean| / sd`` over
the population; a label's is :data:`LABEL_DISTANCE` when it is not the most common value
("servers with the most common hardware and software configurations"), else 0. A host
that lacks a number (no A/A history yet) takes the population's value: no difference.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from hairline.hosts.runs import RunValue, normalised

__all__ = [
    "AA_LEVEL",
    "AA_SPREAD",
    "LABEL_DISTANCE",
    "Candidate",
    "aa_behaviour",
    "distances",
    "nearest",
    "split",
]

# A host whose CPU model (or turbo, governor, SMT) differs from most is as far out as one
# three standard deviations away on a number: left out before any host that only varies.
LABEL_DISTANCE = 3.0
# The A/A features: the host's mean run over its experiments' means (1.0: average), and
# the coefficient of variation of those normalised runs (how noisy it has been).
AA_LEVEL = "aa_level"
AA_SPREAD = "aa_cov"


@dataclass(frozen=True)
class Candidate:
    """One host: its name, numeric features (None: unknown) and label features."""

    name: str
    numbers: Mapping[str, float | None] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


def aa_behaviour(runs: Sequence[RunValue], *, min_runs: int = 3) -> dict[str, dict[str, float]]:
    """Per host name, its :data:`AA_LEVEL` and :data:`AA_SPREAD` over the A/A ``runs``
    (hosts/factors.py's, each normalised by its experiment's mean); hosts with fewer than
    ``min_runs`` runs are absent (no basis to judge them)."""
    kept, values, _ = normalised(runs)
    by_host: dict[str, list[float]] = {}
    for run, value in zip(kept, values, strict=True):
        by_host.setdefault(run.host, []).append(value)
    out: dict[str, dict[str, float]] = {}
    for host, ys in by_host.items():
        if len(ys) < max(min_runs, 2):
            continue
        level = float(np.mean(ys))
        spread = float(np.std(ys, ddof=1)) / level if level else math.nan
        out[host] = {AA_LEVEL: level, AA_SPREAD: spread}
    return out


def _most_common(values: Sequence[str]) -> str:
    counts = Counter(values)
    # Ties go to the first in sorted order, so that the result never depends on input order.
    return min(counts, key=lambda v: (-counts[v], v))


def distances(candidates: Sequence[Candidate]) -> dict[str, float]:
    """Each host's largest normalised difference from the population, over its features."""
    out = {c.name: 0.0 for c in candidates}
    numbers = sorted({k for c in candidates for k in c.numbers})
    for feature in numbers:
        known = [v for c in candidates if (v := c.numbers.get(feature)) is not None]
        finite = [v for v in known if math.isfinite(v)]
        if len(finite) < 2:
            continue
        mean, sd = float(np.mean(finite)), float(np.std(finite))
        if sd == 0:
            continue
        for c in candidates:
            value = c.numbers.get(feature)
            if value is None:
                continue
            gap = abs(value - mean) / sd if math.isfinite(value) else math.inf
            out[c.name] = max(out[c.name], gap)
    labels = sorted({k for c in candidates for k in c.labels})
    for feature in labels:
        common = _most_common([c.labels.get(feature, "unknown") for c in candidates])
        for c in candidates:
            if c.labels.get(feature, "unknown") != common:
                out[c.name] = max(out[c.name], LABEL_DISTANCE)
    return out


def nearest(distance: Mapping[str, float], count: int) -> list[str]:
    """The ``count`` hosts closest to the population (ties by name)."""
    return sorted(distance, key=lambda name: (distance[name], name))[:count]


def split(names: Sequence[str], size: int, *, seed: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``names`` (2 x ``size`` of them) split at random into (test, control), each sorted."""
    if len(names) != 2 * size:
        raise ValueError(f"{len(names)} hosts do not split into two clusters of {size}")
    order = np.random.default_rng(seed).permutation(sorted(names))
    test = tuple(sorted(str(n) for n in order[:size]))
    control = tuple(sorted(str(n) for n in order[size:]))
    return test, control
