"""The two types every model shares: one metric's observations in, one comparison out.

A :class:`MetricSample` holds the rows of one metric of one experiment as parallel numpy
arrays, following DESIGN.md's observation model (arm, trial, batch, host, request, value, t).
Columns a method does not need may be ``None``; a method that needs one raises ``ValueError``
naming it. Arms are coded 0 = A (baseline) and 1 = B (candidate).

Every model returns a :class:`Comparison`. Effects are B relative to A: ``effect_abs`` is
mean(B) - mean(A) and ``effect_rel`` is (mean(B) - mean(A)) / mean(A), as fractions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

__all__ = ["ARM_A", "ARM_B", "Comparison", "MetricSample"]

ARM_A = 0
ARM_B = 1

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class MetricSample:
    """One metric's observations: parallel arrays of equal length.

    ``value`` and ``arm`` are required. ``trial``, ``batch``, ``host`` and ``request`` are
    integer codes (any integers; only equality matters), ``t`` is seconds since the start of
    the trial's measurement phase.
    """

    value: FloatArray
    arm: NDArray[np.int8]
    trial: IntArray | None = None
    batch: IntArray | None = None
    host: IntArray | None = None
    request: IntArray | None = None
    t: FloatArray | None = None

    def __post_init__(self) -> None:
        n = len(self.value)
        for name in ("arm", "trial", "batch", "host", "request", "t"):
            column = getattr(self, name)
            if column is not None and len(column) != n:
                raise ValueError(f"column {name!r} has {len(column)} rows, value has {n}")

    @classmethod
    def from_arrays(
        cls,
        value: object,
        arm: object,
        *,
        trial: object | None = None,
        batch: object | None = None,
        host: object | None = None,
        request: object | None = None,
        t: object | None = None,
    ) -> MetricSample:
        """Build a sample from array-likes, converting dtypes once."""

        def ints(x: object | None) -> IntArray | None:
            return None if x is None else np.asarray(x, dtype=np.int64)

        return cls(
            value=np.asarray(value, dtype=np.float64),
            arm=np.asarray(arm, dtype=np.int8),
            trial=ints(trial),
            batch=ints(batch),
            host=ints(host),
            request=ints(request),
            t=None if t is None else np.asarray(t, dtype=np.float64),
        )

    def __len__(self) -> int:
        return len(self.value)

    def arm_values(self, arm: int) -> FloatArray:
        """The values of one arm (``ARM_A`` or ``ARM_B``)."""
        selected: FloatArray = self.value[self.arm == arm]
        return selected

    def select(self, mask: NDArray[np.bool_]) -> MetricSample:
        """The rows where ``mask`` is true, every column kept aligned."""

        def pick(column: NDArray[np.generic] | None) -> NDArray[np.generic] | None:
            return None if column is None else column[mask]

        return MetricSample(
            value=self.value[mask],
            arm=self.arm[mask],
            trial=pick(self.trial),  # type: ignore[arg-type]
            batch=pick(self.batch),  # type: ignore[arg-type]
            host=pick(self.host),  # type: ignore[arg-type]
            request=pick(self.request),  # type: ignore[arg-type]
            t=pick(self.t),  # type: ignore[arg-type]
        )

    def require(self, *names: str) -> None:
        """Raise ``ValueError`` naming the first missing column a method needs."""
        for name in names:
            if getattr(self, name) is None:
                raise ValueError(f"this method needs the {name!r} column, which is missing")


@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing arm B with arm A on one metric with one model."""

    model: str
    mean_a: float
    mean_b: float
    effect_abs: float
    effect_rel: float
    ci_abs: tuple[float, float]
    ci_rel: tuple[float, float]
    p_value: float
    alpha: float
    n_a: int
    n_b: int
    warnings: tuple[str, ...] = field(default=())
    details: dict[str, float] = field(default_factory=dict)
