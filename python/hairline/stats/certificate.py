"""A calibration certificate beside every verdict: how often this metric's verdicts on this
service cried wolf, and how small a change this experiment could have seen.

Two figures, each answering a question a reader of a verdict has:

- **Is "regression" to be believed?** The metric's false positives on the service's A/A
  history: ``flagged`` of ``runs`` finished A/A experiments whose deciding verdict on it was
  anything but "no change" or "inconclusive" (ServiceLab section 6.3). A calibrated model
  flags Binomial(runs, alpha) of them; the band is the central 95% of that distribution, so
  a count above it says this metric's verdicts claim changes more often than alpha
  promises. No history: the certificate says so rather than assume calibration.
- **Is "no change" to be believed?** The minimum detectable effect (Bloom 1995) of this
  experiment: the smallest true relative change it would have flagged with probability
  ``power``, from its own interval. The interval's half-width is ``z_{1-alpha/2} · SE``, so
  ``SE = half_width / z_{1-alpha/2}`` and ``MDE = (z_{1-alpha/2} + z_power) · SE``. With
  alpha 0.05 and power 0.8 the MDE is 1.43 half-widths. A "no change" whose MDE is 5% says
  nothing about a 1% regression.

Pure: nothing here reads a database or a clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.stats import dist

__all__ = [
    "BAND_CONFIDENCE",
    "DEFAULT_POWER",
    "NOT_A_FINDING",
    "AaHistoryJson",
    "AaRecord",
    "Certificate",
    "CertificateJson",
    "aa_record",
    "binomial_band",
    "certify",
    "is_false_positive",
    "mde",
]

# The verdicts that claim nothing; every other one, on an A/A run, is a false positive.
NOT_A_FINDING = ("no change", "inconclusive")
BAND_CONFIDENCE = 0.95
DEFAULT_POWER = 0.8


def is_false_positive(label: str) -> bool:
    return label not in NOT_A_FINDING


def binomial_band(
    runs: int, alpha: float, *, confidence: float = BAND_CONFIDENCE
) -> tuple[int, int]:
    """The central ``confidence`` range of false-positive counts in ``runs`` A/A runs of a
    model whose false-positive rate is exactly ``alpha``."""
    if runs <= 0:
        return (0, 0)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    low, high = dist.binom_interval(confidence, runs, alpha)
    return (int(low), int(high))


def mde(ci: tuple[float, float], alpha: float, *, power: float = DEFAULT_POWER) -> float | None:
    """The smallest change a two-sided test at ``alpha`` detects with probability ``power``,
    given the ``1 - alpha`` interval ``ci`` it produced, in the interval's units (relative
    or absolute); None when the interval is not finite."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    if not 0 < power < 1:
        raise ValueError(f"power must lie in (0, 1), not {power}")
    low, high = ci
    if not (math.isfinite(low) and math.isfinite(high)) or high < low:
        return None
    z_alpha = float(dist.norm_ppf(1.0 - alpha / 2.0))
    standard_error = (high - low) / 2.0 / z_alpha
    return (z_alpha + float(dist.norm_ppf(power))) * standard_error


@dataclass(frozen=True)
class AaRecord:
    """One metric's verdicts on a service's finished A/A experiments."""

    runs: int
    flagged: int
    alpha: float

    @property
    def band(self) -> tuple[int, int]:
        return binomial_band(self.runs, self.alpha)

    @property
    def rate(self) -> float:
        return self.flagged / self.runs if self.runs else 0.0

    @property
    def calibrated(self) -> bool:
        """Whether the flagged count lies within what a rate of alpha explains."""
        return self.flagged <= self.band[1]


def aa_record(labels: Sequence[str], alpha: float) -> AaRecord:
    """The record of a metric whose A/A runs got ``labels`` (one per run)."""
    return AaRecord(
        runs=len(labels), flagged=sum(is_false_positive(x) for x in labels), alpha=alpha
    )


@documented
class AaHistoryJson(TypedDict):
    """The metric's record on the service's A/A history."""

    runs: int
    """Finished A/A experiments with this metric."""
    flagged: int
    """Of those, the ones whose deciding verdict was anything but "no change" or
    "inconclusive"."""
    alpha: float
    """The false-positive rate the verdicts allow."""
    band: tuple[int, int]
    """The central 95% of Binomial(runs, alpha): the flagged counts alpha explains."""
    calibrated: bool
    """Whether ``flagged`` lies within ``band``."""


@documented
class CertificateJson(TypedDict):
    """What stands behind one verdict: its A/A record and this experiment's minimum
    detectable effect (stats/certificate.py)."""

    aa_history: AaHistoryJson | None
    """The A/A record; null without an A/A history of this metric."""
    mde: float | None
    """The smallest change this experiment detects with probability ``power``; null
    without a finite interval."""
    mde_kind: Literal["relative", "absolute"]
    """``mde`` as a fraction, or in the metric's units, as its threshold is."""
    power: float
    """The power ``mde`` is computed at."""


@dataclass(frozen=True)
class Certificate:
    """What stands behind one metric's verdict: its A/A record (None: no A/A history) and
    this experiment's minimum detectable effect at ``power`` (None: no finite interval),
    relative (a fraction) or in the metric's units, as the verdict's threshold is."""

    metric: str
    aa: AaRecord | None
    mde: float | None
    relative: bool
    power: float = DEFAULT_POWER

    def to_json(self) -> CertificateJson:
        aa: AaHistoryJson | None = None
        if self.aa is not None:
            aa = {"runs": self.aa.runs, "flagged": self.aa.flagged, "alpha": self.aa.alpha,
                  "band": self.aa.band, "calibrated": self.aa.calibrated}  # fmt: skip
        return {"aa_history": aa, "mde": self.mde, "mde_kind": "relative" if self.relative
                else "absolute", "power": self.power}  # fmt: skip


def certify(
    metric: str,
    ci: tuple[float, float],
    alpha: float,
    aa: AaRecord | None,
    *,
    relative: bool = True,
    power: float = DEFAULT_POWER,
) -> Certificate:
    """The certificate of ``metric``'s verdict: its A/A record, if the service has one with
    this metric in it, and the MDE of the interval ``ci`` (relative or absolute) at
    ``alpha``."""
    known = aa if aa is not None and aa.runs > 0 else None
    return Certificate(metric, known, mde(ci, alpha, power=power), relative, power)
