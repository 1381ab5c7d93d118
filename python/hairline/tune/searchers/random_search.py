"""Random sampling without repetition (HHVM section 5.2): uniform draws, log-uniform on
log-scaled parameters, never a configuration told or pending. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from hairline.tune.searchers.common import Told, draw_unexplored, rng_for, taken
from hairline.tune.space import Configuration, Space

__all__ = ["propose_random"]


def propose_random(
    space: Space,
    history: Sequence[Told],
    n: int,
    pending: Sequence[Configuration],
    seed: int,
) -> list[Configuration]:
    rng = rng_for(seed, history, pending, salt=1)
    return draw_unexplored(space, rng, n, taken(space, history, pending))
