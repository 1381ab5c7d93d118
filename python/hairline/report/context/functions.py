"""The "functions that changed" of a report, as text every renderer shows the same way.

When the experiment ran ``--suggested-by REV``, the functions the diff suggester named
(in the source's names, docs/suggest.md) are found among the profile's by the suggester's
own rule (profile/names.py) and marked wherever a renderer lists them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.lab.functions import FunctionAnalysis, FunctionChange, FunctionVerdict
from hairline.profile.functions import SELF, TOTAL
from hairline.profile.names import same_function

__all__ = [
    "FUNCTION_HEADER",
    "SUGGESTED_MARK",
    "FunctionChangeJson",
    "FunctionComparisonJson",
    "FunctionLine",
    "FunctionsJson",
    "function_lines",
    "function_summary",
    "functions_json",
    "suggested_in",
    "suggested_summary",
]

FUNCTION_HEADER = ("function", "cost", "effect ns/request", "effect", "interval (ns)",
                   "share", "verdict")  # fmt: skip
# A report lists this many findings; the JSON has them all.
_SHOWN = 25
#: Beside a function the diff suggester named, in every renderer's table.
SUGGESTED_MARK = "◆"


@dataclass(frozen=True)
class FunctionLine:
    """One finding, every cell as text."""

    cells: tuple[str, str, str, str, str, str, str]
    verdict: str
    #: The diff suggester named this function (``--suggested-by``).
    suggested: bool = False


def suggested_in(names: Iterable[str], suggested: Sequence[str]) -> frozenset[str]:
    """Which of the profile's function ``names`` are one of the functions the diff
    suggester named (``suggested``, as the source names them): the frame is the name, or
    ends with it at a separator once a Rust hash or a Go closure's suffix is off."""
    if not suggested:
        return frozenset()
    return frozenset(n for n in names if any(same_function(n, s) for s in suggested))


def _ns(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:+,.1f}"


def _verdict(change: FunctionChange) -> str:
    if change.verdict == "shift":
        return "shift with " + ", ".join(change.shift_with)
    return change.verdict


def function_lines(
    analysis: FunctionAnalysis, suggested: frozenset[str] = frozenset()
) -> Iterator[FunctionLine]:
    """The findings of ``analysis``, largest absolute effect first; those in
    ``suggested`` (see :func:`suggested_in`) marked."""
    for change in analysis.flagged[:_SHOWN]:
        rel = "n/a" if not math.isfinite(change.effect_rel) else f"{change.effect_rel:+.1%}"
        lo, hi = change.ci_ns
        interval = "n/a" if not math.isfinite(lo) else f"[{_ns(lo)}, {_ns(hi)}]"
        yield FunctionLine(
            cells=(
                change.function,
                "self" if change.kind == SELF else "inclusive",
                _ns(change.effect_ns),
                rel,
                interval,
                f"{change.share:.2%}",
                _verdict(change),
            ),
            verdict=change.verdict,
            suggested=change.function in suggested,
        )


def _effect_words(change: FunctionChange) -> str:
    rel = f" {change.effect_rel:+.1%}" if math.isfinite(change.effect_rel) else ""
    return f"{_verdict(change)}{rel}"


def suggested_summary(analysis: FunctionAnalysis, suggested: Sequence[str]) -> str:
    """One sentence: what became of each function the diff suggester named ("" when the
    experiment was not ``--suggested-by``), found in the table or not."""
    if not suggested:
        return ""
    parts = []
    for name in suggested:
        # Of several profile functions with the name (generic instances), the costliest.
        found = sorted(
            (c for c in analysis.changes if same_function(c.function, name)),
            key=lambda c: max(c.mean_a_ns, c.mean_b_ns),
        )
        by_kind = {c.kind: c for c in found}
        words = [
            f"{label} {_effect_words(by_kind[kind])}"
            for kind, label in ((SELF, "self"), (TOTAL, "inclusive"))
            if kind in by_kind
        ]
        parts.append(
            f"{name} ({'; '.join(words)})"
            if words
            else f"{name} (not compared: under {analysis.min_share:.1%} of the CPU, or not sampled)"
        )
    return (
        f"{SUGGESTED_MARK} the functions the diff suggester named (--suggested-by): "
        + ", ".join(parts)
        + "."
    )


def function_summary(analysis: FunctionAnalysis) -> str:
    """One sentence: what was compared, and how many changed."""
    found = len(analysis.flagged)
    compared = sum(1 for c in analysis.changes if math.isfinite(c.p_value))
    head = f"{analysis.candidate} against {analysis.baseline}: {compared} function costs compared"
    pooled = f" ({analysis.pooled} below {analysis.min_share:.1%} of the CPU pooled)"
    counts = (
        f" over {analysis.trials} trials, {analysis.samples_per_batch:,.0f} samples a batch "
        f"and arm; "
    )
    verdict = f"{found} changed" if found else "none changed"
    more = f" (the {_SHOWN} largest listed)" if found > _SHOWN else ""
    return (
        f"{head}{pooled if analysis.pooled else ''}{counts}{verdict} at a false discovery "
        f"rate of {analysis.fdr:.0%}{more}."
    )


def _plain(x: float) -> float | None:
    return x if math.isfinite(x) else None


@documented
class FunctionChangeJson(TypedDict):
    """One function's cost compared between the candidate and its baseline."""

    function: str
    cost: Literal["self", "inclusive"]
    """The function's own samples, or with its callees'."""
    mean_a_ns: float | None
    """The baseline's CPU per request in the function, in ns."""
    mean_b_ns: float | None
    """The candidate's, in ns."""
    effect_ns: float | None
    """The candidate's minus the baseline's, in ns per request."""
    effect_rel: float | None
    """The effect relative to the baseline's."""
    ci_ns: tuple[float | None, float | None]
    """The effect's interval, in ns per request."""
    p_value: float | None
    p_adjusted: float | None
    """Benjamini-Hochberg over every function compared."""
    share: float
    """The function's share of the baseline's CPU (the candidate's for a new one)."""
    verdict: FunctionVerdict
    shift_with: list[str]
    """For a shift: the functions its cost moved to or from."""
    suggested: bool
    """Whether the diff suggester named it (the experiment ran ``--suggested-by``)."""


@documented
class FunctionComparisonJson(TypedDict):
    """The functions of one candidate against its baseline."""

    candidate: str
    baseline: str
    fdr: float
    """The false discovery rate."""
    min_share: float
    """Functions below this share of the CPU are pooled."""
    trials: int
    samples_per_batch: float
    """Stack samples per batch and arm."""
    compared: int
    """Function costs compared."""
    pooled: int
    """Functions pooled into "(other functions)"."""
    changed: list[FunctionChangeJson]
    """Each function found to change, largest effect first."""
    functions: list[FunctionChangeJson]
    """Every function compared, largest effect first."""


@documented
class FunctionsJson(TypedDict):
    """The functions that changed ([service.profile]; docs/profiling.md)."""

    note: str | None
    """Why there are no function metrics; null when there are, or when the service is not
    profiled."""
    comparisons: list[FunctionComparisonJson]
    """Per candidate."""


def _change_json(c: FunctionChange, suggested: frozenset[str]) -> FunctionChangeJson:
    return {
        "function": c.function,
        "cost": "self" if c.kind == SELF else "inclusive",
        "mean_a_ns": _plain(c.mean_a_ns),
        "mean_b_ns": _plain(c.mean_b_ns),
        "effect_ns": _plain(c.effect_ns),
        "effect_rel": _plain(c.effect_rel),
        "ci_ns": (_plain(c.ci_ns[0]), _plain(c.ci_ns[1])),
        "p_value": _plain(c.p_value),
        "p_adjusted": _plain(c.p_adjusted),
        "share": c.share,
        "verdict": c.verdict,
        "shift_with": list(c.shift_with),
        "suggested": c.function in suggested,
    }


def functions_json(
    analyses: tuple[FunctionAnalysis, ...], note: str, suggested: Sequence[str] = ()
) -> FunctionsJson:
    """The report's ``functions`` object (see experiment_json); ``suggested``: the diff
    suggester's functions, as the source names them."""
    marked = suggested_in({c.function for a in analyses for c in a.changes}, suggested)
    return {
        "note": note or None,
        "comparisons": [
            {
                "candidate": a.candidate,
                "baseline": a.baseline,
                "fdr": a.fdr,
                "min_share": a.min_share,
                "trials": a.trials,
                "samples_per_batch": a.samples_per_batch,
                "compared": sum(1 for c in a.changes if math.isfinite(c.p_value)),
                "pooled": a.pooled,
                "changed": [_change_json(c, marked) for c in a.flagged],
                "functions": [
                    _change_json(c, marked)
                    for c in sorted(a.changes, key=lambda c: -abs(_plain(c.effect_ns) or 0.0))
                ],
            }
            for a in analyses
        ],
    }
