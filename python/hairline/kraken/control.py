"""Kraken's feedback control (section 4.3) as one pure step: the health metrics' levels in,
the next share of traffic for the system under test out.

Steps of about 15% while every metric is BOLD, smaller ones at MODERATE and CAUTIOUS, 1%
once any metric is within 10% of its threshold; hold at NOMORE (capacity is reached after
``hold_intervals`` in a row); step back by the last increase at BACKOFF (the test stops
after ``max_backoffs``); abort when a metric has no samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from hairline.kraken.health import Level

__all__ = ["Action", "Assessment", "ControlState", "Decision", "Policy", "decide"]

Action = Literal["increase", "hold", "back_off", "stop", "abort"]


@dataclass(frozen=True)
class Assessment:
    """A health metric over its window: its level (None: no samples), its latest value and
    its threshold (the low end of NOMORE)."""

    metric: str
    level: Level | None
    value: float | None
    threshold: float


def _default_steps() -> dict[Level, float]:
    return {Level.BOLD: 0.15, Level.MODERATE: 0.05, Level.CAUTIOUS: 0.02}


@dataclass(frozen=True)
class Policy:
    """How the share moves. ``steps`` is the increase at each level below NOMORE (shares of
    all traffic, 0.15 for 15 points); ``near_step`` replaces it when a metric is within
    ``near_fraction`` of its threshold."""

    steps: Mapping[Level, float] = field(default_factory=_default_steps)
    near_step: float = 0.01
    near_fraction: float = 0.10
    hold_intervals: int = 3
    max_backoffs: int = 2
    max_share: float = 1.0

    def __post_init__(self) -> None:
        missing = [lv.name for lv in (Level.BOLD, Level.MODERATE, Level.CAUTIOUS)
                   if lv not in self.steps]  # fmt: skip
        if missing:
            raise ValueError(f"Policy.steps lacks {', '.join(missing)}")
        if not 0 < self.max_share <= 1 or self.near_step <= 0 or self.hold_intervals < 1:
            raise ValueError(f"bad policy: {self}")


@dataclass(frozen=True)
class ControlState:
    """Where the test stands: the share of traffic on the system under test, the last
    increase (what a back off undoes), NOMORE decisions in a row, back offs so far."""

    share: float
    last_increase: float = 0.0
    holds: int = 0
    backoffs: int = 0


@dataclass(frozen=True)
class Decision:
    """What to do next. ``step`` is the change of share (negative for a back off, 0 for a
    hold, a stop without a back off or an abort); ``state`` is the state after it;
    ``metric`` names the metric that decided it, if one did."""

    action: Action
    share: float
    step: float
    reason: str
    metric: str | None
    state: ControlState


def decide(state: ControlState, assessments: Sequence[Assessment], policy: Policy) -> Decision:
    """The next step of the load test from the health metrics' assessments."""
    if not assessments:
        raise ValueError("decide needs at least one health metric's assessment")
    share = min(max(state.share, 0.0), policy.max_share)
    for a in assessments:
        if a.level is None:
            return Decision("abort", share, 0.0, f"{a.metric}: no samples in its window",
                            a.metric, replace(state, share=share))  # fmt: skip

    at_backoff = [a for a in assessments if a.level == Level.BACKOFF]
    if at_backoff:
        worst = at_backoff[0].metric
        back = max(state.last_increase, policy.near_step)
        after = max(share - back, 0.0)
        backoffs = state.backoffs + 1
        new = replace(state, share=after, holds=0, backoffs=backoffs)
        if backoffs >= policy.max_backoffs:
            reason = f"{worst} at BACKOFF: backed off {backoffs} times, the most allowed"
            return Decision("stop", after, after - share, reason, worst, new)
        reason = f"{worst} at BACKOFF: back by the last increase"
        return Decision("back_off", after, after - share, reason, worst, new)

    at_nomore = [a for a in assessments if a.level == Level.NOMORE]
    if at_nomore:
        worst = at_nomore[0].metric
        holds = state.holds + 1
        new = replace(state, share=share, holds=holds)
        if holds >= policy.hold_intervals:
            reason = f"{worst} at NOMORE for {holds} intervals in a row: capacity reached"
            return Decision("stop", share, 0.0, reason, worst, new)
        return Decision("hold", share, 0.0, f"{worst} at NOMORE: hold", worst, new)

    if share >= policy.max_share:
        reason = "all traffic is on the system under test"
        return Decision("stop", share, 0.0, reason, None, replace(state, share=share, holds=0))
    worst_level = max(a.level for a in assessments if a.level is not None)
    step = policy.steps[worst_level]
    deciding = None
    reason = f"every metric at {worst_level.name} or better"
    close_to = 1 - policy.near_fraction
    near = [a for a in assessments if a.value is not None and a.value >= close_to * a.threshold]
    if near and policy.near_step < step:
        step = policy.near_step
        deciding = near[0].metric
        value, threshold = near[0].value or 0.0, near[0].threshold  # near: value is set
        # "Within 10%" of a threshold it has passed read as a pass (0.8039 of 0.75).
        where = (
            "past its threshold"
            if value > threshold
            else f"within {policy.near_fraction:.0%} of its threshold"
        )
        reason = f"{deciding} {where} ({value:.4g} of {threshold:.4g})"
    elif worst_level != Level.BOLD:
        deciding = next(a.metric for a in assessments if a.level == worst_level)
        reason = f"{deciding} at {worst_level.name}"
    after = min(share + step, policy.max_share)
    new = ControlState(share=after, last_increase=after - share, holds=0, backoffs=state.backoffs)
    return Decision("increase", after, after - share, reason, deciding, new)
