"""Factorial designs (pure): the treatments of a full or fractional factorial, the aliasing a
fractional one accepts, and the randomised order of the runs.

A *treatment* gives each factor one level; a *run* is one measured repetition of a
treatment. Treadmill (treadmill-isca16-abstract.txt) measures every treatment several times
in random order, so that a slow drift of the machine cannot pass for a factor's effect.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Generator",
    "Run",
    "Treatment",
    "aliases",
    "fractional_factorial",
    "full_factorial",
    "parse_generator",
    "resolution",
    "run_groups",
]

Treatment = dict[str, str]
_GENERATOR = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(-?)\s*([A-Za-z0-9_*\s]+)$")


@dataclass(frozen=True)
class Generator:
    """``factor = a*b*c`` (or ``= -a*b``): a two-level factor set by the product of others
    in the -1/+1 coding (its first level is -1), which halves the runs at the price of
    aliasing ``factor`` with that interaction."""

    factor: str
    of: tuple[str, ...]
    negative: bool = False

    def __str__(self) -> str:
        return f"{self.factor} = {'-' if self.negative else ''}{'*'.join(self.of)}"


@dataclass(frozen=True)
class Run:
    """One measured repetition of a treatment; ``index`` numbers runs in the design's
    order (treatment-major), ``repetition`` from 0."""

    index: int
    treatment: int
    repetition: int


def parse_generator(text: str) -> Generator:
    """``"c = a*b"`` as a :class:`Generator`; ValueError with the form expected."""
    match = _GENERATOR.match(text)
    if match is None:
        raise ValueError(f'{text!r} is not a generator; write e.g. "c = a*b"')
    factor, minus, product = match.groups()
    of = tuple(word.strip() for word in product.split("*"))
    if len(of) < 2 or any(not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", w) for w in of):
        raise ValueError(
            f"{text!r}: the right side must be a product of two or more factors, like a*b"
        )
    if factor in of or len(set(of)) != len(of):
        raise ValueError(f"{text!r}: each factor may appear once, and not on both sides")
    return Generator(factor, of, negative=minus == "-")


def full_factorial(factors: Mapping[str, Sequence[str]]) -> list[Treatment]:
    """Every combination of levels, the last factor changing fastest."""
    names = list(factors)
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*factors.values())]


def fractional_factorial(
    factors: Mapping[str, Sequence[str]], generators: Sequence[Generator]
) -> list[Treatment]:
    """The 2^(k-p) fraction: a full factorial of the base factors, each generated factor's
    level set by its product. Every factor must have two levels, the generated factors
    must be distinct and their products must name base factors only."""
    generated = [g.factor for g in generators]
    problems = [n for n, levels in factors.items() if len(levels) != 2]
    if problems:
        raise ValueError(
            f"a fractional design needs two-level factors; {', '.join(problems)} have more or fewer"
        )
    if len(set(generated)) != len(generated):
        raise ValueError("a factor is generated twice")
    for g in generators:
        unknown = [n for n in (g.factor, *g.of) if n not in factors]
        if unknown:
            raise ValueError(f"generator {g}: {', '.join(unknown)} not among the factors")
        if any(n in generated for n in g.of):
            raise ValueError(f"generator {g}: generate from base factors only")
    base = {n: levels for n, levels in factors.items() if n not in generated}
    if not base:
        raise ValueError("every factor is generated; leave at least one base factor")
    treatments = []
    for treatment in full_factorial(base):
        signs = {n: -1 if treatment[n] == factors[n][0] else 1 for n in base}
        for g in generators:
            sign = -1 if g.negative else 1
            for n in g.of:
                sign *= signs[n]
            treatment[g.factor] = factors[g.factor][0 if sign < 0 else 1]
        treatments.append({n: treatment[n] for n in factors})
    return treatments


def _words(generators: Sequence[Generator]) -> list[frozenset[str]]:
    """The defining relation: every product of generator words (I = factor*product)."""
    basic = [frozenset((g.factor, *g.of)) for g in generators]
    words = []
    for r in range(1, len(basic) + 1):
        for combo in itertools.combinations(basic, r):
            word: frozenset[str] = frozenset()
            for w in combo:
                word = word ^ w
            words.append(word)
    return words


def resolution(generators: Sequence[Generator]) -> int | None:
    """The design's resolution (the shortest word of its defining relation); None for a
    full factorial."""
    words = _words(generators)
    return min(len(w) for w in words) if words else None


def aliases(
    generators: Sequence[Generator], factors: Sequence[str], order: int
) -> list[tuple[str, str]]:
    """Pairs of terms of up to ``order`` factors that the fraction cannot tell apart (each
    as ``a`` or ``a:b``), within the terms a model of that order estimates."""
    words = _words(generators)
    terms = [frozenset(c) for r in range(1, order + 1) for c in itertools.combinations(factors, r)]
    known = set(terms)
    found = []
    for i, term in enumerate(terms):
        for word in words:
            other = term ^ word
            if other in known and terms.index(other) > i:
                found.append((_term_name(term, factors), _term_name(other, factors)))
    return found


def _term_name(term: frozenset[str], order: Sequence[str]) -> str:
    return ":".join(n for n in order if n in term)


def run_groups(
    treatments: Sequence[Treatment],
    repetitions: int,
    *,
    group_size: int,
    together: Sequence[str] = (),
    seed: int,
) -> list[list[Run]]:
    """The runs cut into groups measured side by side (one lab experiment each), in a
    seeded random order.

    Runs of one group share the factors in ``together`` (the load's: one replay drives
    every arm of an experiment). Each repetition is shuffled on its own, so a treatment
    meets different partners and runs at different times; no group holds one treatment
    twice. A run left alone joins another group where it can, and otherwise gets an
    extra run of another treatment beside it (the lab compares two or more arms).
    """
    if repetitions < 1 or group_size < 1:
        raise ValueError("repetitions and group_size must be at least 1")
    rng = random.Random(seed)
    runs = [
        Run(index=t * repetitions + r, treatment=t, repetition=r)
        for t in range(len(treatments))
        for r in range(repetitions)
    ]
    groups: list[list[Run]] = []
    for repetition in range(repetitions):
        by_load: dict[tuple[str, ...], list[Run]] = {}
        for run in runs:
            if run.repetition == repetition:
                key = tuple(treatments[run.treatment][f] for f in together)
                by_load.setdefault(key, []).append(run)
        for members in by_load.values():
            rng.shuffle(members)
            groups.extend(members[i : i + group_size] for i in range(0, len(members), group_size))
    _merge_singles(groups, group_size, treatments, together)
    rng.shuffle(groups)
    return groups


def _merge_singles(
    groups: list[list[Run]],
    group_size: int,
    treatments: Sequence[Treatment],
    together: Sequence[str],
) -> None:
    """A group of one cannot be an experiment (the lab compares two or more arms): join it
    to another group of its load with room and without its treatment, else split a run off
    a full group of its load to keep it company."""

    def load(run: Run) -> tuple[str, ...]:
        return tuple(treatments[run.treatment][f] for f in together)

    for single in [g for g in groups if len(g) == 1]:
        if len(single) != 1 or not any(g is single for g in groups):
            continue  # another single joined it, or it joined another
        run = single[0]
        host = next(
            (
                g
                for g in groups
                if g is not single
                and len(g) < group_size
                and load(g[0]) == load(run)
                and all(m.treatment != run.treatment for m in g)
            ),
            None,
        )
        if host is not None:
            host.append(run)
            groups.remove(single)
            continue
        donor = next(
            (
                g
                for g in groups
                if g is not single
                and len(g) > 2
                and load(g[0]) == load(run)
                and all(m.treatment != run.treatment for m in g)
            ),
            None,
        )
        if donor is not None:
            single.append(donor.pop())
            continue
        single.append(_companion(groups, run, treatments, load))


def _companion(
    groups: list[list[Run]], run: Run, treatments: Sequence[Treatment], load: Any
) -> Run:
    """An extra run, of the same-load treatment with the fewest runs, to measure beside a
    run that has no partner; a design whose load level has one treatment cannot have one."""
    counts: dict[int, int] = {}
    for group in groups:
        for member in group:
            counts[member.treatment] = counts.get(member.treatment, 0) + 1
    others = [
        t for t in range(len(treatments)) if t != run.treatment and load(Run(0, t, 0)) == load(run)
    ]
    if not others:
        raise ValueError(
            f"treatment {run.treatment + 1} is the only one at its load level, and the lab "
            "compares two or more arms side by side: give the load factors' levels two or "
            "more treatments each"
        )
    chosen = min(others, key=lambda t: (counts.get(t, 0), t))
    index = 1 + max(m.index for g in groups for m in g)
    return Run(index=index, treatment=chosen, repetition=counts.get(chosen, 0))
