"""The exhaustive sweep: every configuration of a finite space in ``Space.grid()`` order,
skipping those told or pending. What a tuning run's result is compared against. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from hairline.tune.searchers.common import Told, taken
from hairline.tune.space import Configuration, Space

__all__ = ["propose_grid"]


def propose_grid(
    space: Space, history: Sequence[Told], n: int, pending: Sequence[Configuration]
) -> list[Configuration]:
    if not space.is_finite():
        raise ValueError(
            "the grid searcher needs a finite space: give every float parameter as a choice "
            "of values, or use another searcher"
        )
    used = taken(space, history, pending)
    out: list[Configuration] = []
    for config in space.grid():
        if len(out) == n:
            break
        if config not in used:
            used.add(config)
            out.append(config)
    return out
