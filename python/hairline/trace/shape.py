"""Shaping what is replayed: keep endpoints, set their mix, sample over time.

ServiceLab's DiffSuggester replays the endpoints a change touches "with the right
proportion" (OSDI '24, section 5.2); its false negatives came from request types missing
from the replayed trace (section 6.2.3). These functions do both halves on a trace:

- :func:`filter_endpoints` keeps requests whose label matches glob patterns;
- :func:`mix_trace` sets the share of each label group exactly: without a count, the
  largest sample without replacement that has exactly those proportions; with a count, that
  many requests, repeating requests of a group that has too few;
- :func:`reservoir_sample` keeps at most K requests per interval T of the recorded time
  (per endpoint if asked), uniformly; :func:`bernoulli_sample` keeps each with probability P.

Every function keeps the kept requests in their original order and with their timestamps,
so ``--pace recorded`` still replays the recorded rhythm. The one exception is a mix that
needs repeats: its output is then C passes over the recorded timeline (C the largest number
of times any request must appear), pass ``j`` shifted by ``j`` times the trace's span plus
one mean gap, like the engine's own looping; each pass holds an equal share of every group.

Randomness comes from the ``rng`` argument only (a seeded ``numpy.random.Generator``).
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from fractions import Fraction

import numpy as np

from hairline.errors import ConfigError, DataError
from hairline.trace.format import Json, TraceRequest

__all__ = [
    "MixGroup",
    "MixResult",
    "MixWeight",
    "Reservoir",
    "SampleResult",
    "bernoulli_sample",
    "derived_header",
    "filter_endpoints",
    "mix_trace",
    "parse_mix",
    "parse_reservoir",
    "reservoir_sample",
]

_UNIT_US = {"us": 1, "µs": 1, "ms": 1_000, "s": 1_000_000, "m": 60_000_000, "h": 3_600_000_000}
_RESERVOIR = re.compile(r"([0-9]+)/([0-9]+(?:\.[0-9]+)?)?(us|µs|ms|s|m|h)")
_RESERVOIR_HINT = "write K/T: at most K requests per interval T, e.g. 100/1s, 10/500ms, 5/1m"


def _labels_of(requests: Sequence[TraceRequest]) -> list[str]:
    return sorted({r.label for r in requests})


def _shown(labels: Sequence[str], limit: int = 12) -> str:
    more = f", ... ({len(labels)} in all)" if len(labels) > limit else ""
    return ", ".join(labels[:limit]) + more


# --- filter ---------------------------------------------------------------------------------


def filter_endpoints(
    requests: Sequence[TraceRequest], patterns: Sequence[str]
) -> list[TraceRequest]:
    """Requests whose label matches any glob pattern (``/api/*``, ``search``).

    A pattern that matches no label is an error (a typo would otherwise empty the trace).
    """
    if not patterns:
        return list(requests)
    labels = _labels_of(requests)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(x, p) for x in labels)]
    if unmatched:
        raise DataError(
            f"--endpoint {', '.join(unmatched)}: no endpoint label matches",
            hint=f"the trace's labels are {_shown(labels)} (`hairline trace stats` lists them)",
        )
    wanted = {x for x in labels if any(fnmatch.fnmatchcase(x, p) for p in patterns)}
    return [r for r in requests if r.label in wanted]


# --- mix ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixWeight:
    """``LABEL=WEIGHT``: the requests whose label matches the glob get that weight."""

    pattern: str
    weight: Fraction
    text: str


def _weight(text: str) -> Fraction | None:
    try:
        number = Decimal(text)
        # A weight's exponent bounds the ratio's size, and so the work to make it exact.
        if not number.is_finite() or abs(number.adjusted()) > 9:
            return None
        value = Fraction(number)
    except (InvalidOperation, ValueError):
        return None
    return value if value > 0 else None


def parse_mix(texts: Iterable[str]) -> tuple[MixWeight, ...]:
    """``LABEL=WEIGHT`` options (split on the last ``=``); all problems at once."""
    weights: list[MixWeight] = []
    problems: list[str] = []
    for text in texts:
        label, sep, raw = text.rpartition("=")
        weight = _weight(raw.strip()) if sep else None
        if not label or weight is None:
            problems.append(f"--mix {text!r}")
            continue
        weights.append(MixWeight(label, weight, text))
    seen = [w.pattern for w in weights]
    problems.extend(
        f"--mix {p!r} given twice" for p in sorted({p for p in seen if seen.count(p) > 1})
    )
    if problems:
        raise ConfigError(
            f"{'; '.join(problems)}: expected LABEL=WEIGHT with a positive weight, once per label",
            hint="e.g. --mix /api/feed=3 --mix /api/search=1 (weights need not sum to 1)",
        )
    return tuple(weights)


@dataclass(frozen=True)
class MixGroup:
    """One ``--mix`` entry: what the trace had and what was chosen."""

    pattern: str
    weight: float
    available: int
    chosen: int
    share: float
    max_copies: int


@dataclass(frozen=True)
class MixResult:
    requests: list[TraceRequest]
    groups: list[MixGroup]
    passes: int
    dropped: int
    with_replacement: bool


def _exact_counts(
    weights: Sequence[Fraction], available: Sequence[int], patterns: Sequence[str]
) -> list[int]:
    # Integer ratios r_g with gcd 1; k copies of the ratio is the only way to be exact.
    denominator = math.lcm(*(w.denominator for w in weights))
    ratio = [int(w * denominator) for w in weights]
    divisor = math.gcd(*ratio)
    ratio = [r // divisor for r in ratio]
    k = min(a // r for a, r in zip(available, ratio, strict=True))
    if k == 0:
        short = [
            f"{p} needs {r}, has {a}"
            for p, r, a in zip(patterns, ratio, available, strict=True)
            if a < r
        ]
        raise DataError(
            f"no sample without repeats has exactly these proportions ({'; '.join(short)})",
            hint="give --count N to repeat requests as needed, or rounder weights "
            "(3 and 1 rather than 0.749 and 0.251)",
        )
    return [k * r for r in ratio]


def _apportion(count: int, weights: Sequence[Fraction]) -> list[int]:
    """Largest-remainder split of ``count`` by ``weights`` (exact when shares allow)."""
    total = sum(weights, Fraction(0))
    quotas = [count * w / total for w in weights]
    counts = [math.floor(q) for q in quotas]
    order = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - counts[i]), i))
    for i in order[: count - sum(counts)]:
        counts[i] += 1
    return counts


def mix_trace(
    requests: Sequence[TraceRequest],
    weights: Sequence[MixWeight],
    *,
    count: int | None = None,
    rng: np.random.Generator,
) -> MixResult:
    """Requests in the proportions of ``weights`` (all requests equally if empty).

    Requests whose label matches no weight's pattern are dropped; a label matching two
    patterns is an error.
    """
    if count is not None and count < 1:
        raise ConfigError(f"--count {count}: must be at least 1", hint="e.g. --count 10000")
    if not weights:
        weights = (MixWeight("*", Fraction(1), "*=1"),)
    labels = _labels_of(requests)
    patterns = [w.pattern for w in weights]
    owner: dict[str, int] = {}
    for label in labels:
        hits = [i for i, p in enumerate(patterns) if fnmatch.fnmatchcase(label, p)]
        if len(hits) > 1:
            raise ConfigError(
                f"endpoint {label!r} matches --mix {patterns[hits[0]]} and {patterns[hits[1]]}",
                hint="make the --mix patterns disjoint",
            )
        if hits:
            owner[label] = hits[0]
    members: list[list[int]] = [[] for _ in weights]
    for i, r in enumerate(requests):
        g = owner.get(r.label)
        if g is not None:
            members[g].append(i)
    empty = [patterns[g] for g, m in enumerate(members) if not m]
    if empty:
        raise DataError(
            f"--mix {', '.join(empty)}: no request has a matching label",
            hint=f"the labels are {_shown(labels)}",
        )
    available = [len(m) for m in members]
    fractions = [w.weight for w in weights]
    if count is None:
        wanted = _exact_counts(fractions, available, patterns)
    else:
        wanted = _apportion(count, fractions)
    passes = max(1, *(math.ceil(n / a) for n, a in zip(wanted, available, strict=True)))

    picked: list[tuple[int, int]] = []  # (pass, request index)
    for group, n in zip(members, wanted, strict=True):
        per_pass = np.full(passes, n // passes, dtype=np.int64)
        if n % passes:
            per_pass[rng.choice(passes, n % passes, replace=False)] += 1
        # One random order of the group, repeated and cut into consecutive runs, one run per
        # pass: every request appears floor or ceil of n/len(group) times, and a run (no
        # longer than the group) never holds a request twice.
        order = rng.permutation(len(group))
        cycle = np.resize(order, n)
        start = 0
        for j, c in enumerate(per_pass):
            picked.extend((j, group[int(x)]) for x in cycle[start : start + int(c)])
            start += int(c)
    picked.sort()

    span_us = _loop_span_us(requests) if passes > 1 else 0
    out = []
    for j, i in picked:
        r = requests[i]
        if j and r.ts_us is not None:
            r = replace(r, ts_us=r.ts_us + j * span_us)
        out.append(r)
    total = len(out)
    copies = Counter(i for _, i in picked)
    groups = [
        MixGroup(
            pattern=w.pattern,
            weight=float(w.weight),
            available=a,
            chosen=n,
            share=n / total,
            max_copies=max((copies[i] for i in m), default=0),
        )
        for w, a, n, m in zip(weights, available, wanted, members, strict=True)
    ]
    return MixResult(
        requests=out,
        groups=groups,
        passes=passes,
        dropped=len(requests) - sum(available),
        with_replacement=passes > 1,
    )


def _loop_span_us(requests: Sequence[TraceRequest]) -> int:
    """Span of the timeline plus one mean gap: where a replayed loop starts again."""
    times = [r.ts_us for r in requests if r.ts_us is not None]
    if len(times) < 2:
        return 1
    first, last = min(times), max(times)
    return max(1, (last - first) + round((last - first) / (len(times) - 1)))


# --- sampling over time ---------------------------------------------------------------------


@dataclass(frozen=True)
class Reservoir:
    """At most ``k`` requests per ``interval_us`` of recorded time."""

    k: int
    interval_us: int
    text: str


def parse_reservoir(text: str) -> Reservoir:
    """``K/T`` with T a decimal number and a unit (us, ms, s, m, h); ``100/s`` = ``100/1s``.

    T must be a whole, positive number of microseconds.
    """
    m = _RESERVOIR.fullmatch(text.strip())
    if m is None:
        raise ConfigError(f"--reservoir {text!r} is not K/T", hint=_RESERVOIR_HINT)
    k = int(m.group(1))
    interval = Decimal(m.group(2) or "1") * _UNIT_US[m.group(3)]
    if k < 1 or interval <= 0 or interval != interval.to_integral_value():
        raise ConfigError(
            f"--reservoir {text!r}: K must be at least 1 and T a whole number of µs above 0",
            hint=_RESERVOIR_HINT,
        )
    return Reservoir(k=k, interval_us=int(interval), text=text.strip())


@dataclass(frozen=True)
class SampleResult:
    """The kept requests (in order), and how full the intervals were."""

    requests: list[TraceRequest]
    total: int
    intervals: int
    full_intervals: int
    max_per_interval: int


def reservoir_sample(
    requests: Sequence[TraceRequest],
    reservoir: Reservoir,
    *,
    per_endpoint: bool = False,
    rng: np.random.Generator,
) -> SampleResult:
    """For each interval ``[t0 + iT, t0 + (i+1)T)`` (t0 the earliest ``ts_us``), a uniform
    sample of ``min(K, n)`` of its ``n`` requests; with ``per_endpoint``, K per endpoint."""
    untimed = sum(1 for r in requests if r.ts_us is None)
    if untimed:
        raise DataError(
            f"{untimed} of {len(requests)} requests have no ts_us; --reservoir samples by time",
            hint="use --fraction P, which needs no timestamps",
        )
    t0 = min((r.ts_us or 0) for r in requests) if requests else 0
    cells: dict[tuple[int, str], list[int]] = {}
    for i, r in enumerate(requests):
        cell = (((r.ts_us or 0) - t0) // reservoir.interval_us, r.label if per_endpoint else "")
        cells.setdefault(cell, []).append(i)
    kept: list[int] = []
    full = 0
    for members in cells.values():
        if len(members) <= reservoir.k:
            kept.extend(members)
            full += len(members) == reservoir.k
        else:
            kept.extend(
                members[int(x)] for x in rng.choice(len(members), reservoir.k, replace=False)
            )
            full += 1
    kept.sort()
    return SampleResult(
        requests=[requests[i] for i in kept],
        total=len(requests),
        intervals=len(cells),
        full_intervals=full,
        max_per_interval=min(reservoir.k, max((len(m) for m in cells.values()), default=0)),
    )


def bernoulli_sample(
    requests: Sequence[TraceRequest], fraction: float, *, rng: np.random.Generator
) -> SampleResult:
    """Each request kept independently with probability ``fraction`` (uniform sampling)."""
    if not (0 < fraction <= 1):
        raise ConfigError(f"--fraction {fraction}: must be in (0, 1]", hint="e.g. --fraction 0.01")
    keep = rng.random(len(requests)) < fraction
    return SampleResult(
        requests=[r for r, k in zip(requests, keep, strict=True) if k],
        total=len(requests),
        intervals=0,
        full_intervals=0,
        max_per_interval=0,
    )


def derived_header(header: Mapping[str, Json], step: Mapping[str, Json]) -> dict[str, Json]:
    """The input header with ``step`` appended to its ``derived`` list (provenance)."""
    out = dict(header)
    previous = out.get("derived")
    out["derived"] = [*(previous if isinstance(previous, list) else []), dict(step)]
    return out
