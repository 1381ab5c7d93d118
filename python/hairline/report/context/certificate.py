"""The calibration certificate beside each verdict, in the words every renderer shares.

For each metric and arm: its false positives on the service's A/A history (``1 of 12 A/A
flagged, 0-2 expected``) and the smallest change this experiment could have detected at 80%
power (``detects 1.2%``); stats/certificate.py says how each is computed.
"""

from __future__ import annotations

from collections.abc import Mapping

from hairline.lab.analysis import Analysis, MetricAnalysis
from hairline.stats.certificate import AaRecord, Certificate, certify

__all__ = ["aa_text", "certificate_of", "certificate_sentence", "certificates", "mde_text"]


def certificate_of(result: MetricAnalysis, aa: Mapping[str, AaRecord]) -> Certificate:
    """In the verdict's terms: relative for a relative threshold, else the metric's units
    (a relative MDE of an error rate near 0 is thousands of percent and means nothing)."""
    c = result.comparison
    relative = result.verdict.rule.kind == "relative"
    ci = c.ci_rel if relative else c.ci_abs
    return certify(result.metric, ci, c.alpha, aa.get(result.metric), relative=relative)


def certificates(
    analysis: Analysis, aa: Mapping[str, AaRecord]
) -> dict[tuple[str, str], Certificate]:
    """Each (metric, candidate)'s certificate; ``aa`` is the service's A/A record by metric
    ({} when it has no A/A history)."""
    return {(r.metric, r.candidate): certificate_of(r, aa) for r in analysis.results}


def aa_text(cert: Certificate) -> str:
    """``1/12 (0-2 expected)``, ``5/12 (0-2 expected): over`` or ``no A/A record`` (no
    finished A/A run of the service has this metric, or ``hairline analyze``: no lab)."""
    if cert.aa is None:
        return "no A/A record"
    low, high = cert.aa.band
    text = f"{cert.aa.flagged}/{cert.aa.runs} ({low}-{high} expected)"
    return text if cert.aa.calibrated else text + ": over"


def mde_text(cert: Certificate) -> str:
    """``1.23%`` (or ``0.0041`` in the metric's units): the smallest change detected with
    probability ``power``; ``n/a`` without a finite interval."""
    if cert.mde is None:
        return "n/a"
    return f"{cert.mde * 100:.3g}%" if cert.relative else f"{cert.mde:.3g}"


def certificate_sentence(cert: Certificate) -> str:
    """The whole certificate in one sentence, for notes and the HTML's metric sections."""
    power = f"{cert.power:.0%} power"
    mde = (
        f"this experiment detects a change of {mde_text(cert)} or more with {power}"
        if cert.mde is not None
        else "this experiment's interval is not finite, so no detectable change is given"
    )
    if cert.aa is None:
        return f"No A/A run of this service has a verdict on this metric; {mde}."
    low, high = cert.aa.band
    aa = (
        f"{cert.aa.flagged} of {cert.aa.runs} A/A runs of this service flagged this metric "
        f"(alpha {cert.aa.alpha:g} explains {low}-{high})"
    )
    if not cert.aa.calibrated:
        aa += ": more than alpha explains, so its verdicts claim changes too often"
    return f"{aa}; {mde}."
