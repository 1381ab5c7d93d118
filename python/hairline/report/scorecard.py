"""A Kayenta-style score: an experiment's deciding verdicts as one number from 0 to 100, for
users who want one (docs/ci.md, "Score"). Pure.

The idea is Kayenta's judge (Spinnaker's automated canary analysis), written for hairline's
verdicts. Each metric of each deciding candidate is **classified** by how the candidate
moved: ``pass`` (no change that matters), ``high`` or ``low`` (it went up or down past the
threshold), or ``inconclusive`` (hairline's interval could not tell; Kayenta has no such
class). A move passes unless it is the metric's worse direction: a regression fails, an
improvement passes. An inconclusive metric passes only where the service's gate policy
passes inconclusive verdicts, and a regression triaged "ignored" passes, as in the gate.

Metrics are scored in **groups** (``[analysis.score.groups.NAME]``): a group's score is
100 times its passing metrics over its metrics, and the experiment's score the mean of the
groups' scores weighted by their ``weight`` (groups without a metric left out), to two
decimals. Without groups every metric is in one group, ``all``, so 9 passing metrics of 10
score 90. A failing metric of a ``critical`` group makes the score 0. The score passes at
or above ``pass_score``, is marginal at or above ``marginal_score``, and fails below it.

    card = scorecard(verdicts, ScoreConfig(groups={...}), inconclusive_passes=False)
    card.score, card.result   # 87.5, "marginal"
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from hairline.config import ScoreConfig, ScoreGroup

__all__ = [
    "ALL_GROUP",
    "Classification",
    "GroupScore",
    "JudgedVerdict",
    "ScoreResult",
    "Scorecard",
    "ScoredMetric",
    "classify",
    "group_of",
    "scorecard",
]

Classification = Literal["pass", "high", "low", "inconclusive"]
ScoreResult = Literal["pass", "marginal", "fail", "nodata"]
# The one group of an experiment whose file names none.
ALL_GROUP = "all"


@dataclass(frozen=True)
class JudgedVerdict:
    """One deciding verdict as the gate sees it."""

    metric: str
    candidate: str
    label: str  # regression | improvement | no change | inconclusive
    direction: str  # higher-is-worse | lower-is-worse
    ignored: bool = False  # a regression triaged "ignored"


@dataclass(frozen=True)
class ScoredMetric:
    metric: str
    candidate: str
    group: str
    classification: Classification
    passed: bool


@dataclass(frozen=True)
class GroupScore:
    name: str
    weight: float
    critical: bool
    metrics: int
    passed: int
    score: float | None  # None: no metric of the experiment is in the group


@dataclass(frozen=True)
class Scorecard:
    score: float | None  # None: no metric to score
    result: ScoreResult
    pass_score: float
    marginal_score: float
    groups: tuple[GroupScore, ...]
    metrics: tuple[ScoredMetric, ...]
    ungrouped: tuple[str, ...]  # metrics no group names: not scored
    reason: str


def classify(verdict: JudgedVerdict, *, inconclusive_passes: bool) -> tuple[Classification, bool]:
    """(how the candidate moved, whether that passes)."""
    up_is_worse = verdict.direction != "lower-is-worse"
    if verdict.label == "regression":
        return ("high" if up_is_worse else "low"), verdict.ignored
    if verdict.label == "improvement":
        return ("low" if up_is_worse else "high"), True
    if verdict.label == "inconclusive":
        return "inconclusive", inconclusive_passes
    return "pass", True


def group_of(metric: str, groups: Mapping[str, ScoreGroup]) -> str | None:
    """The first group naming ``metric`` (exactly, or by a shell pattern); None if none
    does. Without groups, :data:`ALL_GROUP`."""
    if not groups:
        return ALL_GROUP
    for name, group in groups.items():
        # Exact first: a metric of an endpoint (``latency_p99_us[/api]``) has brackets, which
        # a pattern reads as a character class.
        if metric in group.metrics or any(fnmatch.fnmatchcase(metric, p) for p in group.metrics):
            return name
    return None


def scorecard(
    verdicts: Sequence[JudgedVerdict], config: ScoreConfig, *, inconclusive_passes: bool
) -> Scorecard:
    """The score of ``verdicts`` by ``config``'s groups, weights and thresholds."""
    groups = config.groups or {ALL_GROUP: ScoreGroup(metrics=["*"])}
    scored: list[ScoredMetric] = []
    ungrouped: list[str] = []
    for v in verdicts:
        named = group_of(v.metric, config.groups)
        if named is None:
            if v.metric not in ungrouped:
                ungrouped.append(v.metric)
            continue
        classification, passed = classify(v, inconclusive_passes=inconclusive_passes)
        scored.append(ScoredMetric(v.metric, v.candidate, named, classification, passed))
    table = []
    for name, group in groups.items():
        mine = [m for m in scored if m.group == name]
        passing = sum(m.passed for m in mine)
        share = round(100.0 * passing / len(mine), 2) if mine else None
        table.append(GroupScore(name, group.weight, group.critical, len(mine), passing, share))
    counted = [g for g in table if g.score is not None]
    critical = [m for m in scored if not m.passed and groups[m.group].critical]
    score: float | None
    if not counted:
        score = None
    elif critical:
        score = 0.0
    else:
        # Two decimals, before the thresholds judge it: what a tool compares (Argo's
        # ``result.score >= 95``) is what hairline judged.
        total = sum(g.weight for g in counted)
        score = round(sum(g.weight * (100.0 * g.passed / g.metrics) for g in counted) / total, 2)
    result = _result(score, config)
    return Scorecard(score, result, config.pass_score, config.marginal_score, tuple(table),
                     tuple(scored), tuple(ungrouped),
                     _reason(score, result, config, counted, critical))  # fmt: skip


def _result(score: float | None, config: ScoreConfig) -> ScoreResult:
    if score is None:
        return "nodata"
    if score >= config.pass_score:
        return "pass"
    return "marginal" if score >= config.marginal_score else "fail"


def _reason(
    score: float | None,
    result: ScoreResult,
    config: ScoreConfig,
    counted: list[GroupScore],
    critical: list[ScoredMetric],
) -> str:
    """ "87.5: marginal (pass at 95, marginal at 75); cpu 100 (1 of 1, weight 3), memory 50
    (1 of 2, weight 1)"."""
    if score is None:
        return "no deciding verdict to score"
    head = (f"{score:.4g}: {result} (pass at {config.pass_score:g}, "
            f"marginal at {config.marginal_score:g})")  # fmt: skip
    if critical:
        names = ", ".join(f"{m.metric} of {m.candidate}" for m in critical)
        return f"{head}; critical metric failed: {names}"
    parts = [f"{g.name} {g.score:.4g} ({g.passed} of {g.metrics}, weight {g.weight:g})"
             for g in counted]  # fmt: skip
    return head + "; " + ", ".join(parts)
