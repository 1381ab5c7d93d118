"""Sequential trials (provisional: Bonferroni over the looks; to be replaced by a calibrated
repeated-confidence-interval level)."""

from __future__ import annotations

__all__ = ["FIRST_LOOK", "look_alpha", "settled"]

FIRST_LOOK = 3


def look_alpha(alpha: float, first_look: int, max_trials: int) -> float:
    """The level used at every look, so that all looks together keep alpha."""
    return alpha / max(max_trials - first_look + 1, 1)


def settled(label: str) -> bool:
    return label in ("regression", "improvement", "no change")
