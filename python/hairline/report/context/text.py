"""The words every renderer shares: the one-line outcome (:func:`headline`: regression
found, no regression, inconclusive, failed, cancelled, in progress), effects, thresholds,
measured values, and which comparisons decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from hairline.lab.analysis import Analysis, MetricAnalysis
from hairline.report.context.model import ExperimentReport

__all__ = [
    "Headline",
    "Status",
    "comparison_text",
    "deciding_text",
    "effect_text",
    "headline",
    "number_text",
    "threshold_text",
]

Status = Literal["regression", "no regression", "inconclusive", "failed", "cancelled", "running"]


@dataclass(frozen=True)
class Headline:
    """The outcome: its status, and the line that says it."""

    status: Status
    text: str


def effect_text(result: MetricAnalysis) -> tuple[str, str]:
    """The effect and its interval as the verdict judged them: percent or metric units."""
    c = result.comparison
    if result.verdict.rule.kind == "relative":
        lo, hi = c.ci_rel
        return _pct(c.effect_rel), f"[{_pct(lo)}, {_pct(hi)}]"
    lo, hi = c.ci_abs
    return _signed(c.effect_abs), f"[{_signed(lo)}, {_signed(hi)}]"


def threshold_text(result: MetricAnalysis) -> str:
    """``1%``, ``0.001`` or ``1% (lower worse)``."""
    rule = result.verdict.rule
    text = f"{rule.threshold * 100:g}%" if rule.kind == "relative" else f"{rule.threshold:g}"
    return text + (" (lower worse)" if rule.direction == "lower-is-worse" else "")


def number_text(x: float) -> str:
    """A measured value for people: ``157,918``, ``135.4``, ``0.0012``, ``n/a``."""
    if x != x:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _pct(x: float) -> str:
    return "n/a" if x != x else f"{x * 100:+.2f}%"


def _signed(x: float) -> str:
    return "n/a" if x != x else f"{x:+.4g}"


def comparison_text(result: MetricAnalysis) -> str:
    """``change vs parent``: a candidate with the arm it was compared with."""
    return f"{result.candidate} vs {result.baseline}"


def _names(
    results: tuple[MetricAnalysis, ...], *, limit: int, with_effect: bool, chained: bool = False
) -> str:
    many_arms = chained or len({r.candidate for r in results}) > 1
    parts = []
    for r in results[:limit]:
        arm = comparison_text(r) if chained else r.candidate
        name = r.metric + (f" ({arm})" if many_arms else "")
        parts.append(f"{name} {effect_text(r)[0]}" if with_effect else name)
    more = len(results) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


def deciding_text(analysis: Analysis) -> str:
    """Which comparisons decide the outcome and the exit status, in a sentence."""
    deciding = [f"{c} against {b}" for c, b in analysis.comparisons if analysis.decides(c)]
    context = [f"{c} against {b}" for c, b in analysis.comparisons if not analysis.decides(c)]
    text = f"{' and '.join(deciding)} decide{'s' if len(deciding) == 1 else ''} the outcome"
    if context:
        text += f"; {', '.join(context)} {'is' if len(context) == 1 else 'are'} context"
    return text + "."


def _context(analysis: Analysis) -> str:
    """What the comparisons that do not decide found, when they found a regression: the
    parent against production, in a three-sided experiment."""
    found = analysis.context_regressions
    if not found:
        return ""
    names = _names(found, limit=3, with_effect=True, chained=True)
    return f"; not deciding: regression in {names}"


def headline(report: ExperimentReport) -> Headline:
    """The experiment's outcome in one line, for titles, PR comments and logs."""
    prefix = "A/A check: " if report.kind == "aa" else ""
    progress = f"{report.trials_done} of {report.trials} trials"
    if report.phase == "failed":
        reason = (report.failure or "").strip().splitlines()
        return Headline("failed", f"{prefix}failed: {reason[0] if reason else 'no reason given'}")
    if report.phase == "cancelled":
        return Headline("cancelled", f"{prefix}cancelled after {progress}")
    analysis = report.analysis
    if analysis is None:
        if report.phase == "done":
            return Headline("inconclusive", f"{prefix}done, but nothing was analysed")
        return Headline("running", f"{prefix}{report.phase}: {progress} done")
    # Only the deciding comparisons set the outcome; in a three-sided experiment the
    # parent's difference from production is told after it (it is already in production).
    chained = analysis.chained
    deciding = tuple(r for r in analysis.results if analysis.decides(r.candidate))
    context = _context(analysis)
    regressions = analysis.regressions
    if regressions:
        found = _names(regressions, limit=3, with_effect=True, chained=chained)
        if report.kind == "aa":
            # A and B are the same build, so any difference is the lab's noise, not code.
            return Headline("regression", f"{prefix}false alarm in {found}{context}")
        return Headline("regression", f"regression found in {found}{context}")
    unsure = tuple(r for r in deciding if r.verdict.label == "inconclusive")
    if unsure:
        names = _names(unsure, limit=3, with_effect=False, chained=chained)
        return Headline(
            "inconclusive",
            f"{prefix}inconclusive: {len(unsure)} of {len(deciding)} metrics neither "
            f"show nor rule out a regression ({names}){context}",
        )
    better = tuple(r for r in deciding if r.verdict.label == "improvement")
    text = f"{prefix}no regression in {len(deciding)} metrics"
    pairs = {comparison_text(r) for r in deciding}
    if chained and len(pairs) == 1:
        text += f" of {next(iter(pairs))}"
    if better:
        text += f"; improved: {_names(better, limit=3, with_effect=True, chained=chained)}"
    return Headline("no regression", text + context)
