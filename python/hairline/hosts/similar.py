"""Nearly identical machines (ServiceLab section 4.1): which free hosts an experiment gets.

Pure: the inventory (``hosts/inventory.py``) reads the free hosts grouped by their class
columns in one query and hands the groups here; nothing here touches the database.

The rules, in the order they decide:

1. Every host of an experiment matches on region, server type, CPU arch and kernel
   (:data:`CLASS_FACTS`): the three factors that explained 87% of the variance in the
   paper's RTP data, and the region, which matters to services with external dependencies.
   In hardware mode each arm names the facts its host must have (``cpu_model = "..."``);
   the arms' hosts then match on every other fact of :data:`GROUP_FACTS`, so that the
   hardware named is the only difference.
2. CPU models and kernels whose coefficient of variation in past A/A runs is above
   ``max_cov`` are avoided ("ServiceLab avoids using CPUs or kernel versions with high
   variance"), unless an arm names that very model or kernel.
3. The region: the one where the team has the most quota left (section 5.1), the next one
   when none of its classes can take the experiment.
4. Turbo off where it can be read, before turbo unknown, before turbo on.
5. The class with the most free hosts: small classes stay free for the experiments that
   need them.

Within a class, hosts of one CPU model and turbo state are taken together when one group
can hold them all, so that "prefer" rarely has to mean "mix".
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter

__all__ = [
    "ARM_FACTS",
    "CLASS_FACTS",
    "COV_FACTS",
    "GROUP_FACTS",
    "REPORTED_FACTS",
    "Choice",
    "Group",
    "NoChoice",
    "Requirements",
    "assign_slots",
    "choose",
    "mismatches",
    "shared_facts",
]

# What every host of one experiment shares (ServiceLab section 4.1).
CLASS_FACTS = ("region", "server_type", "cpu_arch", "kernel")
# The columns a group of free hosts shares: the class, and the facts preferred alike.
GROUP_FACTS = (*CLASS_FACTS, "cpu_model", "turbo")
# What a hardware-mode arm may name; never the region, which all of an experiment shares.
ARM_FACTS = ("server_type", "cpu_arch", "cpu_model", "kernel", "turbo")
# The facts whose A/A variance is tracked, as in the paper's per-CPU and per-kernel CoV.
COV_FACTS = ("cpu_model", "kernel")
# Facts a report compares between an experiment's hosts (host facts JSON names).
REPORTED_FACTS = (
    "region", "server_type", "arch", "cpu_model", "kernel", "turbo", "governor", "smt",
)  # fmt: skip

_TURBO_RANK = {"off": 0, "unknown": 1, "on": 2}


@dataclass(frozen=True)
class Group:
    """``free`` hosts that share every fact of :data:`GROUP_FACTS`."""

    region: str
    server_type: str
    cpu_arch: str
    kernel: str
    cpu_model: str
    turbo: str
    free: int

    def fact(self, name: str) -> str:
        value: str = getattr(self, name)
        return value

    def matches(self, facts: Mapping[str, str]) -> bool:
        return all(self.fact(k) == v for k, v in facts.items())

    def describe(self) -> str:
        return ", ".join(f"{f} {self.fact(f)}" for f in GROUP_FACTS)


@dataclass(frozen=True)
class Requirements:
    """What an experiment asks of its hosts beyond their number.

    ``arms``: in hardware mode, per arm (in arm order), the facts its host must have
    (names from :data:`ARM_FACTS`); empty otherwise. ``cov``: the coefficient of variation
    of past A/A runs per ``(fact, value)``, e.g. ``("cpu_model", "Xeon E5-2680 v4")``;
    ``max_cov``: above it a CPU model or kernel is avoided (None: never). ``names``: per
    arm (in arm order), the hosts it may take, by name (``[hosts] pin``: test and control
    clusters); empty otherwise. Named hosts are taken by ``hosts/pinning.py``, not chosen.
    """

    arms: tuple[Mapping[str, str], ...] = ()
    max_cov: float | None = None
    cov: Mapping[tuple[str, str], float] = field(default_factory=dict)
    names: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        for facts in self.arms:
            unknown = sorted(set(facts) - set(ARM_FACTS))
            if unknown:
                raise ValueError(f"arm facts {unknown} are not among {ARM_FACTS}")

    @property
    def hardware(self) -> bool:
        return any(self.arms)


@dataclass(frozen=True)
class Choice:
    """The group each open slot takes a host from (slot order), all in ``region``."""

    region: str
    slots: tuple[Group, ...]


@dataclass(frozen=True)
class NoChoice:
    """Nothing fits now; ``reason`` says what is missing."""

    reason: str


def shared_facts(arms: Sequence[Mapping[str, str]]) -> tuple[str, ...]:
    """The facts every host of the experiment must share: the class, or in hardware mode
    every group fact that no arm names."""
    named = {k for facts in arms for k in facts}
    if not named:
        return CLASS_FACTS
    return tuple(f for f in GROUP_FACTS if f not in named)


def _avoid_list(requirements: Requirements, named: Collection[str]) -> dict[tuple[str, str], str]:
    """Why each (fact, value) of high CoV is avoided, for the facts no arm names."""
    limit = requirements.max_cov
    if limit is None:
        return {}
    return {
        (fact, value): (
            f"{fact.replace('_', ' ')} {value!r} varied by {cov:.1%} (CoV) in past A/A runs, "
            f"above max_cov {limit:.1%}"
        )
        for (fact, value), cov in requirements.cov.items()
        if fact in COV_FACTS and fact not in named and cov > limit
    }


def _rank(group: Group, left: int, still_open: int, used: bool) -> tuple[object, ...]:
    return (
        not used,
        left < still_open,
        _TURBO_RANK.get(group.turbo, 1),
        -left,
        group.cpu_model,
        group.turbo,
    )


def _fill(members: Sequence[Group], slots: Sequence[Mapping[str, str]]) -> list[Group] | None:
    """A group per slot from ``members`` (one class), or None when a slot finds none free.

    A group already taken from comes first (one CPU model and turbo state for all), then
    one that can hold every slot still open, then turbo off, then the largest.
    """
    left = {g: g.free for g in members}
    out: list[Group] = []
    for index, slot in enumerate(slots):
        still_open = len(slots) - index
        best: Group | None = None
        best_rank: tuple[object, ...] = ()
        for g in members:
            if left[g] <= 0 or (slot and not g.matches(slot)):
                continue
            rank = _rank(g, left[g], still_open, g in out)
            if best is None or rank < best_rank:
                best, best_rank = g, rank
        if best is None:
            return None
        left[best] -= 1
        out.append(best)
    return out


def choose(
    groups: Sequence[Group],
    slots: Sequence[Mapping[str, str]],
    *,
    room: Mapping[str, int],
    requirements: Requirements | None = None,
    pinned: Mapping[str, str] | None = None,
) -> Choice | NoChoice:
    """Choose a group of free hosts for each of ``slots`` (the facts each must have).

    ``room``: per region, how many more hosts the team may take there (its region quota
    left, else its overall quota left); a region missing from it has no room. ``pinned``:
    facts fixed already (the experiment's recorded region, the class of the hosts it
    keeps). ``requirements.arms`` names the facts of every arm, open or not, so that the
    shared facts are the same ones the kept hosts were chosen by.
    """
    requirements = requirements or Requirements()
    pinned_items = tuple((pinned or {}).items())
    need = len(slots)
    if need == 0:
        raise ValueError("choose() needs at least one slot")
    arms = requirements.arms or tuple(slots)
    named = {k for facts in arms for k in facts}
    shared = shared_facts(arms)
    region_at = shared.index("region")
    getter = attrgetter(*shared)
    # attrgetter of one name gives the value, not a 1-tuple (every arm fact named).
    key_of = getter if len(shared) > 1 else (lambda g: (getter(g),))
    avoid = _avoid_list(requirements, named)
    # This loop runs over every group of free hosts (hundreds: classes times CPU models
    # times turbo states) in every allocation, so it does no more than it must: the
    # pinned facts filter once, the avoided values are looked up by value, and a group
    # with no room in its region is set aside before it is keyed.
    if pinned_items:
        groups = [g for g in groups if all(getattr(g, k) == v for k, v in pinned_items)]
    avoid_model = {v: why for (f, v), why in avoid.items() if f == "cpu_model"}
    avoid_kernel = {v: why for (f, v), why in avoid.items() if f == "kernel"}
    candidates: list[Group] = []
    avoided: dict[str, None] = {}
    usable_regions: set[str] = set()
    short_of_room: set[str] = set()
    by_key: dict[tuple[str, ...], list[Group]] = {}
    for g in groups:
        if g.free <= 0:
            continue
        candidates.append(g)
        if avoid:
            why = avoid_model.get(g.cpu_model) or avoid_kernel.get(g.kernel)
            if why is not None:
                avoided[why] = None
                continue
        region = g.region
        usable_regions.add(region)
        if room.get(region, 0) < need:
            short_of_room.add(region)
            continue
        key = key_of(g)
        members = by_key.get(key)
        if members is None:
            by_key[key] = [g]
        else:
            members.append(g)
    # Each class's rank with the best turbo it could give; fills (the costly part) are
    # made in that order, until no class left could rank above the best one filled.
    bounds = []
    for key, members in by_key.items():
        free = 0
        best_turbo = 2
        for g in members:
            free += g.free
            best_turbo = min(best_turbo, _TURBO_RANK.get(g.turbo, 1))
        if free >= need:
            region = key[region_at]
            bounds.append(((-room[region], region, need * best_turbo, -free, key), members))
    bounds.sort(key=lambda b: b[0])
    best: tuple[tuple[object, ...], list[Group]] | None = None
    for bound, members in bounds:
        if best is not None and bound >= best[0]:
            break
        fill = _fill(members, slots)
        if fill is None:
            continue
        turbo = sum(_TURBO_RANK.get(g.turbo, 1) for g in fill)
        rank = (*bound[:2], turbo, *bound[3:])
        if best is None or rank < best[0]:
            best = (rank, fill)
    if best is not None:
        return Choice(region=str(best[0][1]), slots=tuple(best[1]))
    reason = _why_not(
        candidates, usable_regions, list(avoided), short_of_room, slots, dict(pinned_items)
    )
    return NoChoice(reason)


def _why_not(
    candidates: Sequence[Group],
    usable_regions: Collection[str],
    avoided: Sequence[str],
    short_of_room: Collection[str],
    slots: Sequence[Mapping[str, str]],
    pinned: Mapping[str, str],
) -> str:
    where = (" matching " + ", ".join(f"{k} {v}" for k, v in pinned.items())) if pinned else ""
    if not candidates:
        return f"no host{where} is free"
    if not usable_regions:
        return "every free host" + where + " is avoided: " + "; ".join(avoided)
    if short_of_room and set(usable_regions) <= set(short_of_room):
        return f"the team's quota leaves room for fewer than {len(slots)} hosts in " + ", ".join(
            sorted(short_of_room)
        )
    if any(slots):
        wanted = "; ".join(", ".join(f"{k} {v}" for k, v in s.items()) for s in slots)
        return f"no class of free hosts{where} has one for every arm ({wanted})"
    return f"no class (region, server type, CPU arch, kernel){where} has {len(slots)} free hosts"


def assign_slots(
    hosts: Sequence[Mapping[str, str]], arms: Sequence[Mapping[str, str]]
) -> list[int | None]:
    """For each arm, the index of a host in ``hosts`` whose facts it matches (each host
    once), None where none is left: how hosts kept from an earlier allocation are given
    back to their arms. ``hosts`` are facts by group fact name (``cpu_model``, ...)."""
    taken: set[int] = set()
    # The most particular arms first, so a host that fits several goes where it must.
    order = sorted(range(len(arms)), key=lambda i: -len(arms[i]))
    chosen: dict[int, int | None] = {}
    for i in order:
        found = next(
            (
                h
                for h, facts in enumerate(hosts)
                if h not in taken and all(facts.get(k) == v for k, v in arms[i].items())
            ),
            None,
        )
        if found is not None:
            taken.add(found)
        chosen[i] = found
    return [chosen[i] for i in range(len(arms))]


def mismatches(
    hosts: Sequence[Mapping[str, str]],
    *,
    facts: Sequence[str] = REPORTED_FACTS,
    expected: Collection[str] = (),
) -> dict[str, tuple[str, ...]]:
    """The facts on which an experiment's hosts differ: name -> each host's value.

    ``expected`` are facts meant to differ (the hardware a hardware-mode experiment
    compares); a fact no host reports is not a mismatch.
    """
    out: dict[str, tuple[str, ...]] = {}
    for name in facts:
        if name in expected:
            continue
        values = tuple(h.get(name, "unknown") for h in hosts)
        if len(set(values)) > 1 and any(name in h for h in hosts):
            out[name] = values
    return out
