"""The claim order: priority first, then the team furthest below its quota share, then age;
and, simulated with seeded synthetic teams, hosts shared in proportion to quotas."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from hairline.hosts.fairness import Waiter, claim_order, share


def test_share_is_hosts_held_over_quota_or_over_the_pool_without_one() -> None:
    assert share(2, 10, pool=100) == 0.2
    assert share(5, None, pool=100) == 0.05
    assert share(0, 0, pool=100) == math.inf


def test_priority_goes_first_then_the_team_furthest_below_its_share_then_age() -> None:
    waiters = [
        Waiter("search", priority=0, oldest_at=1.0),  # holds 5 of 10
        Waiter("ads", priority=0, oldest_at=3.0),  # holds 2 of 10
        Waiter("feed", priority=0, oldest_at=2.0),  # holds 20 of 40: same share as search
        Waiter("infra", priority=5, oldest_at=9.0),  # holds all it may
    ]
    held = {"search": 5, "ads": 2, "feed": 20, "infra": 4}
    quotas = {"search": 10, "ads": 10, "feed": 40, "infra": 4}
    order = claim_order(waiters, held=held, quotas=quotas, pool=100)
    assert [w.team for w in order] == ["infra", "ads", "search", "feed"]


def test_a_team_a_processor_is_giving_hosts_to_goes_after_the_others_of_its_priority() -> None:
    # "ads" is furthest below its share, but another processor is allocating for it now:
    # a second would only wait for that one's quota lock. It goes after "search", and
    # still before a team of lower priority.
    waiters = [Waiter("search", 1, 1.0), Waiter("ads", 1, 3.0), Waiter("batch", 0, 0.0)]
    held = {"search": 5, "ads": 2}
    quotas = {"search": 10, "ads": 10, "batch": 10}
    order = claim_order(waiters, held=held, quotas=quotas, pool=100, allocating={"ads"})
    assert [w.team for w in order] == ["search", "ads", "batch"]
    assert [w.team for w in claim_order(waiters, held=held, quotas=quotas, pool=100)] == [
        "ads", "search", "batch",
    ]  # fmt: skip


def test_a_team_with_quota_zero_goes_last_and_one_without_a_quota_counts_the_pool() -> None:
    waiters = [Waiter("none", 0, 1.0), Waiter("zero", 0, 0.0), Waiter("big", 0, 2.0)]
    order = claim_order(waiters, held={"none": 10, "big": 3}, quotas={"zero": 0, "big": 10},
                        pool=100)  # fmt: skip
    assert [w.team for w in order] == ["none", "big", "zero"]


@dataclass
class _Team:
    name: str
    quota: int
    submit_per_step: float  # mean experiments submitted per step


def _simulate(order_by_fairness: bool, seed: int) -> dict[str, float]:
    """A pool of 60 hosts shared by four teams whose quotas add to more than the pool and
    who submit at very different rates; experiments take 2 hosts for a random time. The
    time-averaged share (held / quota) of each team once the queue is busy (each team keeps
    at most 20 experiments waiting)."""
    rng = random.Random(seed)
    teams = [_Team("a", 30, 3.0), _Team("b", 30, 0.6), _Team("c", 15, 0.6), _Team("d", 15, 2.0)]
    pool, hosts_each = 60, 2
    queue: list[tuple[float, str]] = []  # (submitted at, team)
    running: list[tuple[float, str]] = []  # (ends at, team)
    held_sum = {t.name: 0.0 for t in teams}
    steps, warmup = 1500, 200
    for now in range(steps):
        running = [(end, team) for end, team in running if end > now]
        for t in teams:
            waiting = sum(1 for _, team in queue if team == t.name)
            for _ in range(min(_poisson(rng, t.submit_per_step), 20 - waiting)):
                queue.append((now + rng.random(), t.name))
        held = {t.name: 0 for t in teams}
        for _, team in running:
            held[team] += hosts_each
        quotas = {t.name: t.quota for t in teams}
        while pool - sum(held.values()) >= hosts_each and queue:
            fits = [(at, team) for at, team in queue if held[team] + hosts_each <= quotas[team]]
            if not fits:
                break
            if order_by_fairness:
                oldest: dict[str, float] = {}
                for at, team in fits:
                    oldest[team] = min(at, oldest.get(team, math.inf))
                waiters = [Waiter(team, 0, at) for team, at in oldest.items()]
                first = claim_order(waiters, held=held, quotas=quotas, pool=pool)[0]
                chosen = min((x for x in fits if x[1] == first.team), key=lambda x: x[0])
            else:
                chosen = min(fits, key=lambda x: x[0])  # age alone
            queue.remove(chosen)
            held[chosen[1]] += hosts_each
            running.append((now + rng.expovariate(1 / 20), chosen[1]))
        if now >= warmup:
            for name, n in held.items():
                held_sum[name] += n
    return {t.name: held_sum[t.name] / (steps - warmup) / t.quota for t in teams}


def _poisson(rng: random.Random, mean: float) -> int:
    count, total = 0, rng.expovariate(1.0)
    while total < mean:
        count += 1
        total += rng.expovariate(1.0)
    return count


def test_simulated_teams_get_hosts_in_proportion_to_their_quotas() -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The margins of the
    three seeds against 1.15, 0.06 and 1.4 are not recorded."""
    for seed in range(3):
        fair = _simulate(order_by_fairness=True, seed=seed)
        fifo = _simulate(order_by_fairness=False, seed=seed)
        # Every team is backlogged, so fair shares are equal: 60 hosts over quotas of 90
        # is 2/3 each. Age alone serves backlogged teams alike in hosts, whatever their
        # quotas: the small-quota teams end near theirs, the large ones far below.
        assert max(fair.values()) / min(fair.values()) < 1.15, fair
        assert all(abs(s - 2 / 3) < 0.06 for s in fair.values()), fair
        assert max(fifo.values()) / min(fifo.values()) > 1.4, fifo
