"""Hill climbing as HHVM customises it (section 5.2), replayed from the history. Pure.

A climb starts at the default and evaluates the neighbours one step away in one parameter
(``space.neighbours``), one at a time. As soon as one beats the current point by more than
``min_improvement_se`` standard errors of their difference, it moves there (first
improvement); when the whole neighbourhood is told without one, it is stuck. A stuck
search restarts from an unexplored random point, which starts a climb of its own.

Nothing is remembered between calls: the climbs are found again in the history. The default
starts the first; the next starts at the earliest told or pending configuration that no
earlier climb reached or looked at (a restart point), and so on. Each climb is followed to
where it waits (neighbours not yet told) or is stuck. With a batch, a climb's missing
neighbours are proposed first, then those of later climbs, then new restart points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from hairline.tune.searchers.common import (
    Observation,
    Taken,
    Told,
    draw_unexplored,
    rng_for,
    taken,
)
from hairline.tune.space import Configuration, Space, Value, neighbours

__all__ = ["DEFAULT_MIN_IMPROVEMENT_SE", "propose_hill"]

DEFAULT_MIN_IMPROVEMENT_SE = 1.0

Key = tuple[Value, ...]


@dataclass
class _Climb:
    """Where the replay stands: what has been told, what any climb has reached or looked at,
    and what this call proposes."""

    space: Space
    told: dict[Key, Observation]
    covered: set[Key]
    used: Taken
    out: list[Configuration]
    n: int
    min_improvement_se: float

    def follow(self, start: Configuration) -> None:
        """Walks one climb from ``start``: moves while a fully told neighbourhood has a
        clear improvement; proposes a neighbourhood's untold points."""
        current = start
        self.covered.add(self.space.key(current))
        while True:
            here = self.observed(current)
            if here is None or here.value is None:
                return  # a pending start waits; an infeasible one is stuck
            around = neighbours(self.space, current)
            self.covered.update(self.space.key(c) for c in around)
            # First improvement: move as soon as a told neighbour is clearly better, rather
            # than after the whole neighbourhood (5-7 A/Bs at the default alone).
            told = [c for c in around if self.space.key(c) in self.told]
            step = self.best_step(here, told)
            if step is not None:
                current = step
                continue
            untold = [c for c in around if self.space.key(c) not in self.told]
            for config in untold:
                if config not in self.used and len(self.out) < self.n:
                    self.used.add(config)
                    self.out.append(config)
            return

    def observed(self, config: Configuration) -> Observation | None:
        if self.space.key(config) == self.space.key(self.space.default):
            return self.told.get(self.space.key(config), Observation(0.0, 0.0))
        return self.told.get(self.space.key(config))

    def best_step(self, here: Observation, around: list[Configuration]) -> Configuration | None:
        assert here.value is not None
        best: Configuration | None = None
        best_value = -math.inf
        for config in around:
            seen = self.told[self.space.key(config)]
            if seen.value is None or seen.value <= best_value:
                continue
            margin = self.min_improvement_se * math.hypot(seen.se, here.se)
            if seen.value > here.value + margin:
                best, best_value = config, seen.value
        return best


def propose_hill(
    space: Space,
    history: Sequence[Told],
    n: int,
    pending: Sequence[Configuration],
    seed: int,
    *,
    min_improvement_se: float,
) -> list[Configuration]:
    climb = _Climb(
        space=space,
        told={space.key(t.config): t.observation for t in history},
        covered=set(),
        used=taken(space, history, pending),
        out=[],
        n=n,
        min_improvement_se=min_improvement_se,
    )
    climb.follow(space.default)
    for config in [*(t.config for t in history), *pending]:
        if len(climb.out) == n:
            return climb.out
        if space.key(config) not in climb.covered:
            climb.follow(config)
    rng = rng_for(seed, history, pending, salt=2)
    while len(climb.out) < n:
        # A restart point away from every climb so far if there is one left, else any
        # configuration not yet used.
        away = Taken(space, [])
        away.keys = climb.used.keys | climb.covered
        fresh = draw_unexplored(space, rng, 1, away) or draw_unexplored(space, rng, 1, climb.used)
        if not fresh:
            break
        climb.used.add(fresh[0])
        climb.covered.add(space.key(fresh[0]))
        climb.out.append(fresh[0])
    return climb.out
