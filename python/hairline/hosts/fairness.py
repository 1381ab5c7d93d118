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

At equal priority a team that a processor is giving hosts to right now goes after those
no processor is serving. Allocation locks the team's quota, so a second processor that
took the same team would wait for the first: with eight processors on PostgreSQL that
wait was most of the p99 of an allocation (bench/control), and the lowest share of a team
with a large quota barely moves with one more experiment, so it drew every processor.
The allocation lasts milliseconds and hosts are held for minutes: shares are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
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
    allocating: Collection[str] = (),
) -> list[Waiter]:
    """``waiters`` in the order to claim from: highest priority first, then teams no
    processor is ``allocating`` hosts to, then the team furthest below its quota share,
    then the oldest, then by team name (so that every processor agrees)."""
    return sorted(
        waiters,
        key=lambda w: (
            -w.priority,
            w.team in allocating,
            share(held.get(w.team, 0), quotas.get(w.team), pool),
            w.oldest_at,
            w.team,
        ),
    )
