"""A/A health, pure: each metric's false-positive rate over time, with the binomial band.

An A/A experiment compares a build with itself, so any verdict on a metric but "no change"
or "inconclusive" is a false positive (ServiceLab section 6.3). Over a rolling window of
the last ``window`` A/A runs the count of false positives of a calibrated model is
Binomial(n, alpha); the band is the central 95% of that distribution: a count above it
says the model claims changes more often than alpha promises, one inside it says nothing
is wrong. Nothing here reads a database or a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hairline.stats.certificate import (
    BAND_CONFIDENCE,
    NOT_A_FINDING,
    binomial_band,
    is_false_positive,
)

__all__ = [
    "BAND_CONFIDENCE",
    "NOT_A_FINDING",
    "AaRun",
    "FprPoint",
    "binomial_band",
    "fpr_over_time",
    "is_false_positive",
]


@dataclass(frozen=True)
class AaRun:
    """One A/A experiment's verdict on one metric (its deciding comparison)."""

    experiment_id: int
    at: float  # when it finished, Unix s
    label: str


@dataclass(frozen=True)
class FprPoint:
    """The window of A/A runs that ends at ``experiment_id``."""

    experiment_id: int
    at: float
    runs: int  # in the window: fewer than the window's size while the history is short
    false_positives: int
    band_low: int  # a calibrated model shows between these counts 95% of the time
    band_high: int

    @property
    def rate(self) -> float:
        return self.false_positives / self.runs if self.runs else 0.0

    @property
    def above_band(self) -> bool:
        return self.false_positives > self.band_high


def fpr_over_time(runs: Sequence[AaRun], *, alpha: float, window: int = 20) -> tuple[FprPoint, ...]:
    """One point per run (oldest first): the false positives among it and the runs before
    it in a window of ``window`` runs, with the band for that many runs."""
    if window < 1:
        raise ValueError(f"window must be at least 1 run, not {window}")
    ordered = sorted(runs, key=lambda r: (r.at, r.experiment_id))
    flags = [is_false_positive(r.label) for r in ordered]
    points = []
    for i, run in enumerate(ordered):
        start = max(0, i + 1 - window)
        n = i + 1 - start
        low, high = binomial_band(n, alpha)
        points.append(
            FprPoint(
                experiment_id=run.experiment_id,
                at=run.at,
                runs=n,
                false_positives=sum(flags[start : i + 1]),
                band_low=low,
                band_high=high,
            )
        )
    return tuple(points)
