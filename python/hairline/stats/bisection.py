"""Bisection of a range of revisions: which experiment to run next, and when to stop.

The revisions are numbered oldest first: 0 is the good revision, ``n - 1`` the bad one, and
every other index a commit between them. The culprit is the first revision whose own change
exceeds the metric's threshold (ServiceLab section 3.1). Each step is one A/B experiment
whose verdict is a :data:`Outcome`; this module only decides, from the steps taken so far,
what to run next, so it can be checked with made-up outcomes in microseconds.

The rule:

- **Search**: compare the midpoint ``m`` of the open range ``(low, high]`` with the good
  revision 0, not with its neighbour. The whole regression is then in play at every step (a
  10% change is measured as 10%, not split across neighbours), and one verdict halves the
  range: a regression puts the culprit in ``(low, m]``, anything else (no change, an
  improvement) in ``(m, high]``. The bad revision itself is not tested first: when every
  midpoint shows nothing, the confirmation below tests it against its parent.
- **Confirm**: once ``low + 1 == high``, ``high`` is the first revision that differs from the
  good one by more than the threshold. Unless that was already measured against its parent
  (``low == 0``), one more experiment compares ``high`` with ``low``: a regression names
  ``high`` the culprit; otherwise no single revision made the change (``gradual``: small
  changes added up past the threshold), or, when no step ever saw a regression, the range
  holds none (``none``).
- **Repeat** (Pinpoint's rule): an inconclusive step is run again with twice the trials of
  its last attempt, at most ``max_repeats`` times; still inconclusive, the bisection stops
  (``inconclusive``). Repeats count against the budget like any experiment.

Seven candidates (eight revisions) take at most three search steps and one confirmation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "OUTCOMES",
    "Finished",
    "Measured",
    "Outcome",
    "Status",
    "Step",
    "experiments_needed",
    "next_step",
    "stopped",
]

Outcome = Literal["regression", "improvement", "no change", "inconclusive"]
OUTCOMES: tuple[Outcome, ...] = ("regression", "improvement", "no change", "inconclusive")
Status = Literal["culprit", "none", "gradual", "inconclusive", "budget", "failed"]


@dataclass(frozen=True)
class Step:
    """One experiment to run: revision ``candidate`` against revision ``baseline``.

    ``attempt`` is 1, or 2, 3, ... for a repeat of an inconclusive step (with ``trials``
    doubled each time)."""

    baseline: int
    candidate: int
    trials: int
    purpose: Literal["search", "confirm"]
    attempt: int = 1


@dataclass(frozen=True)
class Measured:
    """A step that ran, and the verdict of the metric bisected on."""

    step: Step
    outcome: Outcome


@dataclass(frozen=True)
class Finished:
    """Why the bisection stopped. ``culprit`` is an index when ``status == "culprit"``;
    ``(low, high]`` is the range it narrowed to (for ``gradual``: ``high`` is the first
    revision past the threshold measured against the good one)."""

    status: Status
    culprit: int | None
    low: int
    high: int
    reason: str


def experiments_needed(revisions: int) -> int:
    """The most experiments a bisection of ``revisions`` takes with no repeat: a search of
    ``revisions - 1`` candidates and one confirmation."""
    _check_revisions(revisions)
    return math.ceil(math.log2(revisions - 1)) + 1 if revisions > 2 else 1


def _check_revisions(revisions: int) -> None:
    if revisions < 2:
        raise ValueError(f"a bisection needs a good and a bad revision, got {revisions}")


@dataclass
class _Range:
    low: int
    high: int
    # Whether some step measured ``high`` past the threshold against the good revision.
    high_seen: bool = False
    confirmed: Outcome | None = None


def _narrow(revisions: int, tested: Sequence[Measured]) -> _Range:
    known = _Range(low=0, high=revisions - 1)
    for done in tested:
        step, outcome = done.step, done.outcome
        if outcome == "inconclusive":
            continue
        if step.purpose == "confirm":
            known.confirmed = outcome
        if step.baseline != 0:
            continue
        if outcome == "regression":
            if step.candidate <= known.high:
                known.high, known.high_seen = step.candidate, True
        elif step.candidate > known.low:
            known.low = step.candidate
    return known


def stopped(revisions: int, tested: Sequence[Measured], reason: str) -> Finished:
    """A bisection a step's experiment stopped by failing (a build, the service): status
    ``failed`` with the range narrowed by the steps ``tested`` before it."""
    _check_revisions(revisions)
    known = _narrow(revisions, tested)
    return Finished("failed", None, known.low, known.high, reason)


def next_step(
    revisions: int,
    tested: Sequence[Measured],
    *,
    trials: int,
    max_experiments: int,
    max_repeats: int = 2,
) -> Step | Finished:
    """The next experiment of a bisection over ``revisions`` revisions (0 good, the last
    bad), given the steps ``tested`` so far in the order they ran; or why it is over.

    ``trials`` is a first attempt's trials; ``max_experiments`` counts every experiment,
    repeats included.
    """
    _check_revisions(revisions)
    if trials < 1 or max_experiments < 1 or max_repeats < 0:
        raise ValueError("trials and max_experiments must be >= 1 and max_repeats >= 0")
    known = _narrow(revisions, tested)

    def over(status: Status, reason: str, culprit: int | None = None) -> Finished:
        return Finished(status, culprit, known.low, known.high, reason)

    def within_budget(step: Step) -> Step | Finished:
        if len(tested) >= max_experiments:
            return over(
                "budget",
                f"{max_experiments} experiments used; the culprit is in "
                f"({known.low}, {known.high}]",
            )
        return step

    last = tested[-1] if tested else None
    if last is not None and last.outcome == "inconclusive":
        if last.step.attempt > max_repeats:
            return over(
                "inconclusive",
                f"revision {last.step.candidate} against {last.step.baseline} stayed "
                f"inconclusive after {last.step.attempt} attempts "
                f"(the last with {last.step.trials} trials)",
            )
        repeat = Step(
            last.step.baseline,
            last.step.candidate,
            last.step.trials * 2,
            last.step.purpose,
            last.step.attempt + 1,
        )
        return within_budget(repeat)
    if known.confirmed is not None:
        if known.confirmed == "regression":
            return over("culprit", "its change from its parent exceeds the threshold", known.high)
        if known.high_seen:
            return over(
                "gradual",
                f"revision {known.high} is past the threshold against the good one, but its "
                "own change is not: smaller changes added up",
            )
        return over("none", "no revision in the range changed the metric past its threshold")
    if known.low + 1 >= known.high:
        if known.high_seen and known.low == 0:
            # Its comparison with the good revision was already one with its parent.
            return over("culprit", "its change from its parent exceeds the threshold", known.high)
        return within_budget(Step(known.low, known.high, trials, "confirm"))
    middle = (known.low + known.high) // 2
    return within_budget(Step(0, middle, trials, "search"))
