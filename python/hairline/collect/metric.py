"""What a built-in metric is, and the seam a collector plugs into.

A metric is declared once, as a :class:`MetricSpec` (name, unit, direction, what it means),
in the module of the collector that measures it; :mod:`hairline.collect.registry` lists the
collectors. The lab's runner opens every collector's :class:`Window` around a batch's
measurement phase and asks each for its values per arm (``lab/runner.py``); config, reports
and the CLI read names and directions from the registry.

A collector sees each arm through :class:`ArmProbe` (its processes, its memory) and, once
the load ended, what the runner measured of the arm in the window (:class:`Measured`: the
load engine's counts and latencies, the CPU its cgroup used), so that a metric "per
request" divides by the same number of responses as every other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

__all__ = [
    "ArmProbe",
    "Collector",
    "Derived",
    "Direction",
    "Measured",
    "MetricSpec",
    "Reading",
    "Window",
]

Direction = Literal["higher-is-worse", "lower-is-worse"]


@dataclass(frozen=True)
class MetricSpec:
    """One built-in metric: the name its observation rows carry, its unit (the name says it
    too: ``_ns``, ``_us``, ``_bytes``, ``_per_s``), the way it gets worse, and a sentence
    for the docs and ``hairline`` users."""

    name: str
    unit: str
    direction: Direction
    description: str


@dataclass(frozen=True)
class Measured:
    """What the runner measured of one arm in a batch's window: the load engine's counts
    and latencies, and the CPU the arm used (the runner reads it anyway: the batch's
    validity check needs it)."""

    requests: int
    errors: int
    latency_p50_us: float
    latency_p99_us: float
    cpu_ns: int
    # The measurement phase's planned length: the rate both arms were offered is over it.
    duration_s: float

    @property
    def served(self) -> int:
        """The divisor of every metric per request: responses, at least 1."""
        return max(self.requests, 1)


class ArmProbe(Protocol):
    """What a collector may read of a running arm (the lab's ``Arm`` is one)."""

    def pids(self) -> list[int]: ...
    def anon_memory_bytes(self) -> int: ...
    def peak_memory_bytes(self) -> int | None: ...


class Window(Protocol):
    """One collector's part of one batch: entered just before the load starts, left as soon
    as it ends (also when it fails), then asked for each arm's values."""

    def __enter__(self) -> Window: ...
    def __exit__(self, *exc: object) -> None: ...
    def values(self, arm: str, measured: Measured) -> dict[str, float]:
        """``{metric name: value}`` of ``arm``; a metric the collector could not read
        this time (no samples, no cgroup v2) is left out, and so has no row."""
        ...


class Collector(Protocol):
    """Measures one or more built-in metrics. ``optional`` ones run only when the service
    file names them in ``collect``; the rest run in every batch."""

    @property
    def name(self) -> str: ...
    @property
    def metrics(self) -> tuple[MetricSpec, ...]: ...
    @property
    def optional(self) -> bool: ...
    def window(self, arms: Mapping[str, ArmProbe]) -> Window: ...


class _DerivedWindow:
    def __init__(self, compute: Callable[[Measured], dict[str, float]]) -> None:
        self._compute = compute

    def __enter__(self) -> _DerivedWindow:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def values(self, arm: str, measured: Measured) -> dict[str, float]:
        return self._compute(measured)


@dataclass(frozen=True)
class Derived:
    """A collector that reads nothing itself: its metrics are a pure function of
    :class:`Measured` (CPU per request, goodput, latencies)."""

    name: str
    metrics: tuple[MetricSpec, ...]
    compute: Callable[[Measured], dict[str, float]]
    optional: bool = False

    def window(self, arms: Mapping[str, ArmProbe]) -> Window:
        return _DerivedWindow(self.compute)


@dataclass(frozen=True)
class Reading:
    """A collector that reads the arms themselves during the window (memory, context
    switches): ``opens`` makes the window for the arms of a batch."""

    name: str
    metrics: tuple[MetricSpec, ...]
    opens: Callable[[Mapping[str, ArmProbe]], Window]
    optional: bool = False

    def window(self, arms: Mapping[str, ArmProbe]) -> Window:
        return self.opens(arms)
