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
    ``max_cov``: above it a CPU model or kernel is avoided (None: never).
    """

    arms: tuple[Mapping[str, str], ...] = ()
    max_cov: float | None = None
    cov: Mapping[tuple[str, str], float] = field(default_factory=dict)

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


def _avoided(group: Group, named: Collection[str], requirements: Requirements) -> str | None:
    if requirements.max_cov is None:
        return None
    for fact in COV_FACTS:
        if fact in named:
            continue
        cov = requirements.cov.get((fact, group.fact(fact)))
        if cov is not None and cov > requirements.max_cov:
            return (
                f"{fact.replace('_', ' ')} {group.fact(fact)!r} varied by {cov:.1%} (CoV) in "
                f"past A/A runs, above max_cov {requirements.max_cov:.1%}"
            )
    return None


def _fill(members: Sequence[Group], slots: Sequence[Mapping[str, str]]) -> list[Group] | None:
    """A group per slot from ``members`` (one class), or None when a slot finds none free.

    A group already taken from comes first (one CPU model and turbo state for all), then
    one that can hold every slot still open, then turbo off, then the largest.
    """
    left = {g: g.free for g in members}
    out: list[Group] = []
    for index, slot in enumerate(slots):
        fits = [g for g in members if left[g] > 0 and g.matches(slot)]
        if not fits:
            return None
        still_open = len(slots) - index
        best = min(
            fits,
            key=lambda g: (
                g not in out,
                left[g] < still_open,
                _TURBO_RANK.get(g.turbo, 1),
                -left[g],
                g.cpu_model,
                g.turbo,
            ),
        )
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
    pinned = pinned or {}
    need = len(slots)
    if need == 0:
        raise ValueError("choose() needs at least one slot")
    arms = requirements.arms or tuple(slots)
    named = {k for facts in arms for k in facts}
    shared = shared_facts(arms)
    candidates = [g for g in groups if g.free > 0 and g.matches(pinned)]
    usable: list[Group] = []
    avoided: list[str] = []
    for g in candidates:
        why = _avoided(g, named, requirements)
        if why is None:
            usable.append(g)
        elif why not in avoided:
            avoided.append(why)
    by_key: dict[tuple[str, ...], list[Group]] = {}
    for g in usable:
        by_key.setdefault(tuple(g.fact(f) for f in shared), []).append(g)
    options: list[tuple[tuple[object, ...], list[Group], str]] = []
    short_of_room: set[str] = set()
    for key, members in by_key.items():
        region = dict(zip(shared, key, strict=True))["region"]
        if room.get(region, 0) < need:
            short_of_room.add(region)
            continue
        fill = _fill(members, slots)
        if fill is None:
            continue
        turbo = sum(_TURBO_RANK.get(g.turbo, 1) for g in fill)
        free = sum(g.free for g in members)
        options.append(((-room[region], region, turbo, -free, key), fill, region))
    if options:
        _, fill, region = min(options, key=lambda o: o[0])
        return Choice(region=region, slots=tuple(fill))
    return NoChoice(_why_not(candidates, usable, avoided, short_of_room, slots, pinned))


def _why_not(
    candidates: Sequence[Group],
    usable: Sequence[Group],
    avoided: Sequence[str],
    short_of_room: Collection[str],
    slots: Sequence[Mapping[str, str]],
    pinned: Mapping[str, str],
) -> str:
    where = (" matching " + ", ".join(f"{k} {v}" for k, v in pinned.items())) if pinned else ""
    if not candidates:
        return f"no host{where} is free"
    if not usable:
        return "every free host" + where + " is avoided: " + "; ".join(avoided)
    if short_of_room and {g.region for g in usable} <= set(short_of_room):
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
