"""How long an experiment's trials take on host pairs side by side ([design] host_pairs on
the ray backend): one trial per pair at a time, so ``T`` trials on ``P`` pairs take
ceil(T / P) trial times. ``hairline sensitivity`` and ``hairline plan`` answer with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PairsTime", "trials_on_pairs"]


@dataclass(frozen=True)
class PairsTime:
    """``trials`` trials spread over ``host_pairs`` host pairs side by side (one trial per
    pair at a time): ``rounds`` = ceil(trials / host_pairs) trial times, ``minutes`` when
    a trial's time is known. The MDE is that of ``trials``: each trial compares its arms
    on one pair, swapping hosts, so a pair's own effect cancels within the trial (the
    lab's reports check it with the host pair as the cluster)."""

    host_pairs: int
    trials: int
    rounds: int
    minutes: float | None


def trials_on_pairs(
    trials: int, host_pairs: Sequence[int], trial_s: float | None = None
) -> tuple[PairsTime, ...]:
    """How long ``trials`` take on each number of ``host_pairs`` (see :class:`PairsTime`)."""
    if trials < 1 or any(p < 1 for p in host_pairs):
        raise ValueError(f"trials ({trials}) and host pairs ({list(host_pairs)}) must be >= 1")
    return tuple(
        PairsTime(
            host_pairs=p,
            trials=trials,
            rounds=math.ceil(trials / p),
            minutes=None if trial_s is None else math.ceil(trials / p) * trial_s / 60.0,
        )
        for p in host_pairs
    )
