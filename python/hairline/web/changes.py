"""Change points on a service's history (docs/dashboard.md, "Change points"): each
metric's stored relative effects, oldest first, searched by stats/changepoints.py, each
change with the experiments and commits on either side of it. The service page draws them
and `hairline history` prints them; both read metric_history (web/pagedata.py).

The series is each experiment's relative effect as stored, not a running sum of them: the
experiments are independent measurements, and a running sum would add their noise into a
random walk that any change-point method takes for changes (its spread grows as the square
root of the count: after 50 experiments with +-1% intervals, about +-3.5%). The test on
the effects themselves asks whether their level moved, which is what the running sum's
slope would show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from hairline.stats.changepoints import (
    DEFAULT_ALPHA,
    DEFAULT_PERMUTATIONS,
    ChangePoint,
    change_points,
)
from hairline.web.pagedata import HistoryPoint

__all__ = ["HistoryChange", "history_changes", "metric_changes"]


@dataclass(frozen=True)
class HistoryChange:
    """A change of a metric's level between two experiments of its history: ``index`` is
    ``first_after``'s position among the history's points; ``before`` and ``after`` are the
    median relative effects of the points since the previous change and up to the next."""

    index: int
    last_before: HistoryPoint
    first_after: HistoryPoint
    before: float
    after: float
    p_value: float

    @property
    def size(self) -> float:
        return self.after - self.before


def metric_changes(
    points: Sequence[HistoryPoint],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> tuple[HistoryChange, ...]:
    """The change points of one metric's history (points without a finite relative effect
    are left out of the search, and never border a change)."""
    kept = [
        i
        for i, p in enumerate(points)
        if p.relative_effect is not None and math.isfinite(p.relative_effect)
    ]
    values = tuple(float(points[i].relative_effect or 0.0) for i in kept)
    found = _search(values, alpha, permutations, seed)
    return tuple(
        HistoryChange(
            index=kept[c.index],
            last_before=points[kept[c.index - 1]],
            first_after=points[kept[c.index]],
            before=c.before,
            after=c.after,
            p_value=c.p_value,
        )
        for c in found
    )


def history_changes(
    history: dict[str, tuple[HistoryPoint, ...]],
    *,
    alpha: float = DEFAULT_ALPHA,
    permutations: int = DEFAULT_PERMUTATIONS,
    seed: int = 0,
) -> dict[str, tuple[HistoryChange, ...]]:
    """:func:`metric_changes` of each metric of a ``metric_history``."""
    return {
        metric: metric_changes(points, alpha=alpha, permutations=permutations, seed=seed)
        for metric, points in history.items()
    }


# A page view searches every metric of the service again; the history changes only when
# an experiment ends, so the same series (and settings) are answered from here.
@lru_cache(maxsize=512)
def _search(
    values: tuple[float, ...], alpha: float, permutations: int, seed: int
) -> tuple[ChangePoint, ...]:
    return change_points(values, alpha=alpha, permutations=permutations, seed=seed)
