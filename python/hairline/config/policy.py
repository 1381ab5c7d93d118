"""What counts as a regression of a metric: its threshold and the direction that is worse.

Written in a service file's ``[metrics.NAME]`` or on the command line as
``--threshold cpu_per_request=1%`` or ``--threshold p99_ms=0.5`` and
``--direction throughput=lower-is-worse``; the lab's built-in metrics know their direction.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from hairline.collect.metric import Direction
from hairline.collect.registry import BUILTIN, builtin_direction
from hairline.errors import ConfigError

__all__ = [
    "BUILTIN_DIRECTIONS",
    "DEFAULT_THRESHOLD",
    "DIRECTIONS",
    "DROPPED_WRITES",
    "FAMILY_POLICIES",
    "Direction",
    "MetricPolicy",
    "Threshold",
    "builtin_direction",
    "metric_family",
    "parse_directions",
    "parse_threshold",
    "parse_thresholds",
]

DIRECTIONS: dict[str, Direction] = {
    "higher-is-worse": "higher-is-worse",
    "higher": "higher-is-worse",
    "lower-is-worse": "lower-is-worse",
    "lower": "lower-is-worse",
}


@dataclass(frozen=True)
class Threshold:
    """The smallest change that matters: relative (a fraction of the baseline) or absolute."""

    value: float
    relative: bool

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


DEFAULT_THRESHOLD = Threshold(0.01, relative=True)


@dataclass(frozen=True)
class MetricPolicy:
    """What counts as a regression of one metric."""

    threshold: Threshold = DEFAULT_THRESHOLD
    direction: Direction = "higher-is-worse"


def parse_threshold(text: str, *, source: str = "threshold") -> Threshold:
    """``"1%"`` -> relative 0.01; ``"0.5"`` -> absolute 0.5 (in the metric's unit)."""
    raw = text.strip()
    relative = raw.endswith("%")
    number = raw[:-1].strip() if relative else raw
    try:
        value = float(number)
    except ValueError:
        raise ConfigError(
            f"{source}: {text!r} is not a threshold",
            hint="write a percentage of the baseline such as 1% or 0.5%, "
            "or an absolute amount in the metric's unit such as 0.2",
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"{source}: {text!r} must be a finite, non-negative amount",
            hint="thresholds are magnitudes; the direction is set separately",
        )
    return Threshold(value / 100 if relative else value, relative=relative)


def _split(item: str, flag: str) -> tuple[str, str]:
    metric, sep, rest = item.partition("=")
    if not sep or not metric.strip() or not rest.strip():
        raise ConfigError(
            f"{flag} {item!r}: expected METRIC=VALUE",
            hint=f"for example {flag} cpu_per_request=1%",
        )
    return metric.strip(), rest.strip()


def parse_thresholds(items: Iterable[str]) -> dict[str, Threshold]:
    """Parse repeated ``--threshold METRIC=VALUE`` options; every bad one is reported."""
    out: dict[str, Threshold] = {}
    problems: list[str] = []
    for item in items:
        try:
            metric, value = _split(item, "--threshold")
            out[metric] = parse_threshold(value, source=f"--threshold {metric}")
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError("; ".join(problems))
    return out


def parse_directions(items: Iterable[str]) -> dict[str, Direction]:
    """Parse repeated ``--direction METRIC=higher-is-worse|lower-is-worse`` options."""
    out: dict[str, Direction] = {}
    for item in items:
        metric, value = _split(item, "--direction")
        direction = DIRECTIONS.get(value.lower())
        if direction is None:
            raise ConfigError(
                f"--direction {metric}: {value!r} is not a direction",
                hint="use higher-is-worse (latency, CPU) or lower-is-worse (throughput)",
            )
        out[metric] = direction
    return out


# The lab's own metrics, each with the direction in which it gets worse: the registry's
# (collect/registry.py), where each is declared once.
BUILTIN_DIRECTIONS: dict[str, Direction] = {name: m.direction for name, m in BUILTIN.items()}


#: The writes an arm's egress proxies answered themselves, per downstream endpoint and batch
#: (``dropped_writes[127.0.0.1:9000 POST /v1/order]``, docs/safety.md).
DROPPED_WRITES = "dropped_writes"
# Built-in policies of per-endpoint families (metric_family). A count whose baseline is
# often 0 has no relative change: one write more per batch than the baseline matters.
FAMILY_POLICIES: dict[str, MetricPolicy] = {
    DROPPED_WRITES: MetricPolicy(threshold=Threshold(1.0, relative=False)),
}


def metric_family(metric: str) -> str:
    """The name of the family a per-endpoint metric belongs to, its ``[...]`` part left out:
    ``dropped_writes[127.0.0.1:9000 POST /v1/order]`` -> ``dropped_writes``,
    ``reads_total[/api/feed]_per_request`` -> ``reads_total_per_request``. A policy named
    for the family holds for each of its endpoints that has none of its own."""
    head, bracket, rest = metric.partition("[")
    if not bracket or "]" not in rest:
        return metric
    return head + rest.split("]", 1)[1]
