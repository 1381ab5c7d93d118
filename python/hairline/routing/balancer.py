"""The semantic balancer (HHVM section 2.2): every interval, each partition's share of the
hosts follows its load, by a PID controller per partition on its load per host against the
pool's average. Pure: the caller measures each partition's load and applies the placement.

The controller works on a real-valued share of hosts per partition (the shares sum to the
number of hosts). A partition's error is its load per share against the pool's load per
host, ``(load_p / share_p) / (total / hosts) - 1``; its share moves by the incremental
(velocity) form of a PID on the logarithm of the share, so that a partition 20% too hot
grows by about the same fraction whatever its size. The error is taken against the share
the controller asked for, not the whole hosts it got: load follows the request mix, not
the hosts, so the rounding to whole hosts cannot wind the controller up.

A share is realised as whole hosts plus at most one host split between two partitions by
HAProxy weights (:class:`Placement`). Whole hosts move with hysteresis: a partition gains
a host only when its share exceeds its hosts by more than half a host plus
``hysteresis_hosts``, so after a move the share must travel more than a whole host the
other way to undo it, and noise cannot swap a host back and forth. What rounding leaves
over goes to the split host, whose weights move continuously.

No partition is ever emptied: every share stays at or above ``min_share`` hosts (at least
one), so each partition keeps a whole host of its own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

__all__ = ["BalancerSettings", "BalancerState", "Placement", "realise", "start", "step"]


@dataclass(frozen=True)
class BalancerSettings:
    """Gains are per interval, per unit of relative error."""

    kp: float = 0.1
    ki: float = 0.5
    kd: float = 0.0
    # Errors within the band count as none: a share does not chase its load's noise (at 3%,
    # 2% noise per interval kept the simulated shares wandering by up to 0.8 of a host).
    deadband: float = 0.05
    # The largest relative change of a share in one interval (x1.25 up, /1.25 down).
    max_step: float = 0.25
    min_share: float = 1.0
    hysteresis_hosts: float = 0.15
    # A split smaller than this fraction of a host is not worth a weight change.
    min_split: float = 0.05

    def __post_init__(self) -> None:
        # Programming errors: route fleet's options are checked where the user gives them.
        assert self.ki > 0 and self.kp >= 0 and self.kd >= 0
        assert 0 <= self.deadband < 1 and self.max_step > 0 and self.min_share >= 1
        assert 0 <= self.hysteresis_hosts < 0.5 and 0 <= self.min_split < 0.5


@dataclass(frozen=True)
class Placement:
    """Which partition each host serves: ``home`` has every host; the split host (if any)
    also gives ``split_fraction`` of itself to ``split_to``."""

    home: Mapping[str, str]
    split_host: str | None = None
    split_to: str | None = None
    split_fraction: float = 0.0

    def weights(self) -> dict[str, dict[str, float]]:
        """Partition -> host -> the fraction of the host it gets (1.0 for a whole host)."""
        out: dict[str, dict[str, float]] = {}
        for host, partition in self.home.items():
            out.setdefault(partition, {})[host] = 1.0
        if self.split_host is not None and self.split_to is not None:
            out[self.home[self.split_host]][self.split_host] = 1.0 - self.split_fraction
            out.setdefault(self.split_to, {})[self.split_host] = self.split_fraction
        return out

    def capacity(self) -> dict[str, float]:
        """Partition -> hosts it gets (whole hosts plus its part of the split host)."""
        return {p: sum(hosts.values()) for p, hosts in self.weights().items()}


@dataclass(frozen=True)
class BalancerState:
    settings: BalancerSettings
    hosts: tuple[str, ...]
    shares: Mapping[str, float]
    placement: Placement
    previous_errors: Mapping[str, float] = field(default_factory=dict)
    older_errors: Mapping[str, float] = field(default_factory=dict)
    intervals: int = 0


def start(
    hosts: Sequence[str],
    load_shares: Mapping[str, float],
    settings: BalancerSettings | None = None,
) -> BalancerState:
    """Shares in proportion to the expected loads (the profile's), realised on ``hosts``."""
    settings = settings or BalancerSettings()
    if len(hosts) < len(load_shares) * settings.min_share:
        raise ValueError(
            f"{len(hosts)} hosts cannot give {len(load_shares)} partitions "
            f"{settings.min_share:g} host each"
        )
    total = sum(load_shares.values())
    raw = {
        p: (s / total if total > 0 else 1 / len(load_shares)) * len(hosts)
        for p, s in load_shares.items()
    }
    shares = _bounded(raw, len(hosts), settings.min_share)
    return BalancerState(
        settings, tuple(hosts), shares, realise(shares, tuple(hosts), None, settings)
    )


def step(state: BalancerState, loads: Mapping[str, float]) -> BalancerState:
    """One interval: each partition's load over it in (any unit, the same for all), the
    next shares and placement out. A pool that carried no load keeps its shares."""
    s = state.settings
    total = sum(max(0.0, loads.get(p, 0.0)) for p in state.shares)
    if total <= 0:
        return replace(state, intervals=state.intervals + 1)
    average = total / len(state.hosts)
    wanted: dict[str, float] = {}
    errors: dict[str, float] = {}
    limit = math.log1p(s.max_step)
    for p, share in state.shares.items():
        error = (max(0.0, loads.get(p, 0.0)) / share) / average - 1.0
        error = 0.0 if abs(error) <= s.deadband else error
        previous = state.previous_errors.get(p, error)
        older = state.older_errors.get(p, previous)
        change = s.kp * (error - previous) + s.ki * error + s.kd * (error - 2 * previous + older)
        wanted[p] = share * math.exp(min(max(change, -limit), limit))
        errors[p] = error
    shares = _bounded(wanted, len(state.hosts), s.min_share)
    return replace(
        state,
        shares=shares,
        placement=realise(shares, state.hosts, state.placement, s),
        previous_errors=errors,
        older_errors=state.previous_errors,
        intervals=state.intervals + 1,
    )


def realise(
    shares: Mapping[str, float],
    hosts: Sequence[str],
    previous: Placement | None,
    settings: BalancerSettings,
) -> Placement:
    """Whole hosts per partition (moved with hysteresis from ``previous``), then one host
    split between the partition furthest over its share and the one furthest under."""
    order = list(shares)
    if previous is None:
        counts = _largest_remainder(shares, len(hosts))
        home: dict[str, str] = {}
        queue = list(hosts)
        for p in order:
            for _ in range(counts[p]):
                home[queue.pop(0)] = p
    else:
        home = dict(previous.home)
        counts = {p: sum(1 for q in home.values() if q == p) for p in order}
        threshold = 0.5 + settings.hysteresis_hosts
        for _ in range(len(hosts) * len(order)):
            gap = {p: shares[p] - counts[p] for p in order}
            needy = max(order, key=lambda p: gap[p])
            spare = min(order, key=lambda p: gap[p])
            if counts[spare] <= 1 or gap[needy] <= 0 or gap[spare] >= 0:
                break
            if gap[needy] <= threshold and gap[spare] >= -threshold:
                break
            # The spare partition's host that it shared last time goes first, else its last.
            theirs = [h for h in hosts if home[h] == spare]
            moving = previous.split_host if previous.split_host in theirs else theirs[-1]
            assert moving is not None
            home[moving] = needy
            counts[spare] -= 1
            counts[needy] += 1
    gap = {p: shares[p] - counts[p] for p in order}
    giver = min(order, key=lambda p: gap[p])
    taker = max(order, key=lambda p: gap[p])
    fraction = min(-gap[giver], gap[taker], 1.0)
    if giver == taker or fraction < settings.min_split or counts[giver] < 2:
        return Placement(home)
    theirs = [h for h in hosts if home[h] == giver]
    keep = previous.split_host if previous is not None else None
    split_host = keep if keep in theirs else theirs[-1]
    return Placement(home, split_host, taker, round(fraction, 4))


def _largest_remainder(shares: Mapping[str, float], n: int) -> dict[str, int]:
    counts = {p: max(1, math.floor(s)) for p, s in shares.items()}
    while sum(counts.values()) < n:
        p = max(shares, key=lambda q: shares[q] - counts[q])
        counts[p] += 1
    while sum(counts.values()) > n:
        p = min((q for q in shares if counts[q] > 1), key=lambda q: shares[q] - counts[q])
        counts[p] -= 1
    return counts


def _bounded(raw: Mapping[str, float], n: int, minimum: float) -> dict[str, float]:
    """``raw`` scaled to sum ``n`` with none below ``minimum`` (those held at it, the rest
    scaled into what is left)."""
    held: set[str] = set()
    while True:
        free = {p: v for p, v in raw.items() if p not in held}
        room = n - minimum * len(held)
        scale = room / sum(free.values()) if sum(free.values()) > 0 else 0.0
        low = {p for p, v in free.items() if v * scale < minimum}
        if not low or scale == 0.0:
            out = {p: minimum if p in held else raw[p] * scale for p in raw}
            if scale == 0.0:
                out = {p: n / len(raw) for p in raw}
            return out
        held |= low
