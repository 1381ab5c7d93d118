"""Single-parameter tuning (HHVM section 5.2): each parameter swept on its own, the others
held at the default, in the space's order; then, with ``combine``, the configuration of
each parameter's best swept value (the default's counts, at 0), and no more. Pure.

A wide integer range or a float is swept at ``points`` evenly spaced values (on the log
scale when it is log-scaled); narrower ones at every value, booleans flipped, every other
choice. The paper sweeps every value; with a budget of 20 evaluations that cannot reach a
second parameter of range [1, 1024].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hairline.tune.searchers.common import Told, taken
from hairline.tune.space import (
    BoolParam,
    ChoiceParam,
    Configuration,
    IntParam,
    Param,
    Space,
    Value,
)

__all__ = ["DEFAULT_POINTS", "propose_single", "sweep"]

DEFAULT_POINTS = 5


def sweep(space: Space, points: int) -> list[tuple[str, Configuration]]:
    """Every configuration of the sweep with the parameter it varies, in order."""
    out: list[tuple[str, Configuration]] = []
    for p in space.params:
        for value in _values(space, p, points):
            if value != space.default[p.name]:
                out.append((p.name, {**space.default, p.name: value}))
    return out


def _values(space: Space, p: Param, points: int) -> list[Value]:
    if isinstance(p, BoolParam):
        return [False, True]
    if isinstance(p, ChoiceParam):
        return list(p.choices)
    if isinstance(p, IntParam) and len(p.values()) <= points:
        return list(p.values())
    # decode() puts a unit coordinate on the parameter's own (log) scale and rounds integers.
    single = Space((p,), {p.name: space.default[p.name]})
    values: list[Value] = []
    for u in np.linspace(0.0, 1.0, points):
        value = single.decode([float(u)])[p.name]
        if value not in values:
            values.append(value)
    return values


def propose_single(
    space: Space,
    history: Sequence[Told],
    n: int,
    pending: Sequence[Configuration],
    *,
    points: int,
    combine: bool,
) -> list[Configuration]:
    used = taken(space, history, pending)
    plan = sweep(space, points)
    out: list[Configuration] = []
    for _, config in plan:
        if len(out) == n:
            return out
        if config not in used:
            used.add(config)
            out.append(config)
    if combine and len(out) < n:
        best = _combined(space, history, plan)
        if best not in used:
            out.append(best)
    return out


def _combined(space: Space, history: Sequence[Told], plan: list[tuple[str, Configuration]]
              ) -> Configuration:  # fmt: skip
    """Each parameter at the swept value that did best (the default's value when none beat
    its 0); sweep points still pending count as not done better."""
    told = {space.key(t.config): t.observation.value for t in history}
    best: Configuration = dict(space.default)
    best_value = {p.name: 0.0 for p in space.params}
    for name, config in plan:
        value = told.get(space.key(config))
        if value is not None and value > best_value[name]:
            best_value[name] = value
            best[name] = config[name]
    return best
