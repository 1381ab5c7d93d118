"""Which waiting experiment a processor claims next: priority, then fairness, then age.

Pure (ServiceLab section 5.1: "the processor tracks the already used portion of the quota
and determines when to allocate machines for experiments, enforcing priority and
fairness"). The queue (``lab/queue.py``) reads the claimable experiments grouped by
(priority, team) and each team's hosts held; the order is decided here.

A team's *share* is the hosts it holds over its quota. Among experiments of equal
priority, the team with the smallest share, the one furthest below its quota, goes first:
a team holding 2 of its 10 hosts goes before one holding 5 of its 10, and before one
holding 20 of its 40. Equal shares go oldest first. A team without a quota may use the
whole pool, so its share is what it holds over the pool; a team whose quota is 0 can get
nothing and goes last.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Waiter", "claim_order", "share"]


@dataclass(frozen=True)
class Waiter:
    """The claimable experiments of one team at one priority, as one entry."""

    team: str
    priority: int
    oldest_at: float  # created_at of its oldest experiment, Unix seconds


def share(held: int, quota: int | None, pool: int) -> float:
    """Hosts held over the quota (over the pool for a team without one); inf for quota 0."""
    limit = pool if quota is None else quota
    if limit <= 0:
        return math.inf
    return held / limit


def claim_order(
    waiters: Sequence[Waiter],
    *,
    held: Mapping[str, int],
    quotas: Mapping[str, int],
    pool: int,
) -> list[Waiter]:
    """``waiters`` in the order to claim from: highest priority first, then the team
    furthest below its quota share, then the oldest, then by team name (so that every
    processor agrees)."""
    return sorted(
        waiters,
        key=lambda w: (
            -w.priority,
            share(held.get(w.team, 0), quotas.get(w.team), pool),
            w.oldest_at,
            w.team,
        ),
    )
