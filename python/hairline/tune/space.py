"""A tuning run's search space: its parameters, the default configuration, and the unit cube
the searchers work in. Pure: no I/O.

A configuration is a plain ``dict`` from parameter name to value. Searchers that model the
objective (Bayesian optimisation) see a configuration as a point of ``[0, 1]^d``: one
coordinate per integer, float or boolean parameter (log-scaled ones on the log scale) and one
per choice of a choice parameter (one-hot), so that no order is imposed on the choices.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product

import numpy as np
import numpy.typing as npt

__all__ = [
    "BoolParam",
    "ChoiceParam",
    "Configuration",
    "FloatParam",
    "IntParam",
    "Param",
    "Space",
    "Value",
    "neighbours",
    "sample",
]

Value = int | float | bool | str
Configuration = dict[str, Value]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class IntParam:
    """Whole numbers from ``low`` to ``high`` inclusive; ``log``: searched on a log scale
    (``low`` >= 1), as sizes and counts usually are."""

    name: str
    low: int
    high: int
    log: bool = False
    # The only values allowed, ascending (e.g. powers of 2), when not every whole number of
    # the range is worth a try; low and high are then its ends.
    levels: tuple[int, ...] = ()

    def values(self) -> list[int]:
        return list(self.levels) if self.levels else list(range(self.low, self.high + 1))

    def nearest(self, value: float) -> int:
        """The allowed value nearest ``value`` on the parameter's (log) scale."""
        if not self.levels:
            return int(min(max(round(value), self.low), self.high))
        u = _unit(self, min(max(value, self.low), self.high))
        return min(self.levels, key=lambda level: abs(_unit(self, level) - u))


@dataclass(frozen=True)
class FloatParam:
    name: str
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True)
class BoolParam:
    name: str


@dataclass(frozen=True)
class ChoiceParam:
    name: str
    choices: tuple[Value, ...]


Param = IntParam | FloatParam | BoolParam | ChoiceParam


def _unit(p: IntParam | FloatParam, value: float) -> float:
    if p.high == p.low:
        return 0.5
    if p.log:
        return (math.log(value) - math.log(p.low)) / (math.log(p.high) - math.log(p.low))
    return (value - p.low) / (p.high - p.low)


def _from_unit(p: IntParam | FloatParam, u: float) -> float:
    u = min(max(u, 0.0), 1.0)
    if p.log:
        return math.exp(math.log(p.low) + u * (math.log(p.high) - math.log(p.low)))
    return p.low + u * (p.high - p.low)


@dataclass(frozen=True)
class Space:
    """The parameters in the tuning file's order, and the default configuration (the
    control of every A/B; the hill climber's start)."""

    params: tuple[Param, ...]
    default: Configuration = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    @property
    def dims(self) -> int:
        """Coordinates of the unit cube: one per parameter, one per choice of a choice."""
        return sum(len(p.choices) if isinstance(p, ChoiceParam) else 1 for p in self.params)

    def key(self, config: Mapping[str, Value]) -> tuple[Value, ...]:
        """A hashable identity of a configuration (to never propose one twice)."""
        return tuple(config[p.name] for p in self.params)

    def encode(self, config: Mapping[str, Value]) -> FloatArray:
        """The configuration as a point of the unit cube."""
        out: list[float] = []
        for p in self.params:
            value = config[p.name]
            if isinstance(p, ChoiceParam):
                out.extend(1.0 if c == value else 0.0 for c in p.choices)
            elif isinstance(p, BoolParam):
                out.append(1.0 if value else 0.0)
            else:
                out.append(_unit(p, float(value)))
        return np.asarray(out, dtype=np.float64)

    def decode(self, x: Sequence[float] | FloatArray) -> Configuration:
        """The configuration nearest a point of the unit cube (integers rounded on their
        scale, booleans at 0.5, a choice by its largest coordinate)."""
        config: Configuration = {}
        i = 0
        for p in self.params:
            if isinstance(p, ChoiceParam):
                width = len(p.choices)
                config[p.name] = p.choices[int(np.argmax(np.asarray(x[i : i + width])))]
                i += width
                continue
            u = float(x[i])
            i += 1
            if isinstance(p, BoolParam):
                config[p.name] = u >= 0.5
            elif isinstance(p, IntParam):
                config[p.name] = p.nearest(_from_unit(p, u))
            else:
                config[p.name] = float(_from_unit(p, u))
        return config

    def is_finite(self) -> bool:
        return not any(isinstance(p, FloatParam) for p in self.params)

    def size(self) -> int | None:
        """How many configurations there are; None when a float parameter makes it
        uncountable."""
        if not self.is_finite():
            return None
        return math.prod(len(_discrete_values(p)) for p in self.params)

    def grid(self) -> Iterator[Configuration]:
        """Every configuration of a space without float parameters, in a fixed order."""
        if not self.is_finite():
            raise ValueError("a space with a float parameter has no finite grid")
        columns = [_discrete_values(p) for p in self.params]
        for values in product(*columns):
            yield dict(zip(self.names, values, strict=True))


def _discrete_values(p: Param) -> list[Value]:
    if isinstance(p, IntParam):
        return list(p.values())
    if isinstance(p, BoolParam):
        return [False, True]
    if isinstance(p, ChoiceParam):
        return list(p.choices)
    raise ValueError(f"{p.name} is a float parameter")


# A float's step for the hill climber: this share of its range (of its log range when log).
FLOAT_STEP = 0.1
# Floats after a step are rounded to this many significant digits, so that stepping up then
# down lands on the same key instead of a value one ulp away.
FLOAT_DIGITS = 10


def neighbours(space: Space, config: Mapping[str, Value]) -> list[Configuration]:
    """The configurations one step from ``config`` in one parameter, down then up, in the
    space's parameter order: integers by 1 (log-scaled ones by a factor of 2), floats by
    a tenth of their (log) range, booleans flipped, a choice to the previous and next one.
    Steps that would leave the range are clipped to it; steps that change nothing are left
    out."""
    out: list[Configuration] = []
    seen = {space.key(config)}
    for p in space.params:
        for value in _steps(p, config[p.name]):
            moved = {**config, p.name: value}
            if space.key(moved) not in seen:
                seen.add(space.key(moved))
                out.append(moved)
    return out


def _steps(p: Param, value: Value) -> list[Value]:
    if isinstance(p, BoolParam):
        return [not value]
    if isinstance(p, ChoiceParam):
        i = p.choices.index(value)
        return [p.choices[j] for j in (i - 1, i + 1) if 0 <= j < len(p.choices)]
    if isinstance(p, IntParam) and p.levels:
        i = p.levels.index(int(value))
        return [p.levels[j] for j in (i - 1, i + 1) if 0 <= j < len(p.levels)]
    if isinstance(p, IntParam):
        v = int(value)
        if p.log:
            down, up = max(v // 2, 1), v * 2
        else:
            down, up = v - 1, v + 1
        return [min(max(s, p.low), p.high) for s in (down, up)]
    u = _unit(p, float(value))
    return [
        float(f"{_from_unit(p, min(max(u + d, 0.0), 1.0)):.{FLOAT_DIGITS}g}")
        for d in (-FLOAT_STEP, FLOAT_STEP)
    ]


def sample(space: Space, rng: np.random.Generator) -> Configuration:
    """One configuration drawn uniformly: each parameter independently, log-scaled ones
    log-uniformly (integers uniform over their rounded values)."""
    config: Configuration = {}
    for p in space.params:
        if isinstance(p, BoolParam):
            config[p.name] = bool(rng.integers(2))
        elif isinstance(p, ChoiceParam):
            config[p.name] = p.choices[int(rng.integers(len(p.choices)))]
        elif isinstance(p, IntParam) and p.levels:
            config[p.name] = p.levels[int(rng.integers(len(p.levels)))]
        elif isinstance(p, IntParam) and not p.log:
            config[p.name] = int(rng.integers(p.low, p.high + 1))
        elif isinstance(p, IntParam):
            config[p.name] = p.nearest(_from_unit(p, rng.random()))
        else:
            config[p.name] = float(_from_unit(p, rng.random()))
    return config
