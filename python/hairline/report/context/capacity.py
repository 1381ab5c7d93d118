"""Capacity mode in a report: each arm's highest rate under the SLO, with its interval."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hairline.kit.jsonout import documented
from hairline.report.context.model import ExperimentReport
from hairline.stats import dist

__all__ = ["ArmCapacity", "arm_capacities", "capacity_text"]


@documented
@dataclass(frozen=True)
class ArmCapacity:
    """One arm's capacity over the accepted batches: the mean knee and a 95% t-interval
    (NaN with one batch)."""

    arm: str
    max_throughput_per_s: float
    """The mean over batches of the highest rate that met the SLO."""
    low_per_s: float
    """Its 95% interval's low end (NaN, null in JSON, with one batch)."""
    high_per_s: float
    """Its 95% interval's high end."""
    batches: int


def arm_capacities(report: ExperimentReport) -> tuple[ArmCapacity, ...]:
    """Each arm's capacity, in the report's arm order. Pure."""
    order = [a.name for a in report.arms]
    order += [c.arm for c in report.curves if c.arm not in order]
    out = []
    for arm in dict.fromkeys(order):
        knees = np.array([c.max_rate_per_s for c in report.curves if c.arm == arm])
        if knees.size == 0:
            continue
        mean = float(knees.mean())
        half = math.nan
        if knees.size > 1:
            sem = float(knees.std(ddof=1)) / math.sqrt(knees.size)
            half = float(dist.t_ppf(0.975, knees.size - 1)) * sem
        out.append(ArmCapacity(arm, mean, mean - half, mean + half, int(knees.size)))
    return tuple(out)


def capacity_text(capacity: ArmCapacity) -> str:
    """``1,234 requests/s (95% CI 1,200 to 1,270, 6 batches)``."""
    text = f"{capacity.max_throughput_per_s:,.0f} requests/s"
    if math.isnan(capacity.low_per_s):
        return f"{text} (1 batch)"
    return (
        f"{text} (95% CI {capacity.low_per_s:,.0f} to {capacity.high_per_s:,.0f}, "
        f"{capacity.batches} batches)"
    )
