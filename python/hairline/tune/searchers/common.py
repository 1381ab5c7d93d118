"""What every searcher shares: the observations it is told, its seeded rng, which
configurations it may no longer propose, and drawing unexplored ones. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from hairline.tune.space import Configuration, Space, Value, sample

__all__ = ["Observation", "Taken", "Told", "draw_unexplored", "rng_for", "taken"]

# Rejection sampling gives up after this many draws per wanted configuration and falls back
# to the grid's remaining configurations (a finite space nearly used up).
DRAWS_PER_CONFIG = 200

Key = tuple[Value, ...]


@dataclass(frozen=True)
class Observation:
    """One A/B's outcome for a configuration: ``value`` the relative effect against the
    default with higher better (None: infeasible, it failed to start or broke the SLO)
    and ``se`` its standard error."""

    value: float | None
    se: float


@dataclass(frozen=True)
class Told:
    config: Configuration
    observation: Observation


def rng_for(
    seed: int, history: Sequence[Told], pending: Sequence[Configuration], salt: int
) -> np.random.Generator:
    """The rng of one call: a function of the seed and how far the run has got, so that a
    resumed run draws what the uninterrupted one would have."""
    return np.random.default_rng([seed % 2**63, len(history), len(pending), salt])


class Taken:
    """Keys a searcher may not propose: the default, everything told or pending, and what it
    has chosen so far in this call."""

    def __init__(self, space: Space, configs: Iterable[Configuration]) -> None:
        self.space = space
        self.keys: set[Key] = {space.key(space.default)}
        for config in configs:
            self.keys.add(space.key(config))

    def __contains__(self, config: Configuration) -> bool:
        return self.space.key(config) in self.keys

    def add(self, config: Configuration) -> None:
        self.keys.add(self.space.key(config))

    def exhausted(self) -> bool:
        size = self.space.size()
        return size is not None and len(self.keys) >= size


def taken(space: Space, history: Sequence[Told], pending: Sequence[Configuration]) -> Taken:
    return Taken(space, [*(t.config for t in history), *pending])


def draw_unexplored(
    space: Space, rng: np.random.Generator, n: int, used: Taken
) -> list[Configuration]:
    """Up to ``n`` configurations drawn uniformly (``space.sample``) among those not yet
    used, each added to ``used``; fewer only when the space has no more."""
    out: list[Configuration] = []
    for _ in range(n * DRAWS_PER_CONFIG):
        if len(out) == n or used.exhausted():
            return out
        config = sample(space, rng)
        if config not in used:
            used.add(config)
            out.append(config)
    if space.is_finite() and len(out) < n:
        rest = [c for c in space.grid() if c not in used]
        for i in rng.permutation(len(rest))[: n - len(out)]:
            used.add(rest[int(i)])
            out.append(rest[int(i)])
    return out
