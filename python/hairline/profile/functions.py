"""Functions' shares of a profile, and how those become CPU per request (pure).

A function's *self* share is the fraction of samples whose leaf it is; its *inclusive*
share the fraction in which it is anywhere on the stack (once per stack, recursion or
not). Multiplied by the arm's CPU nanoseconds per request of the same batch, a share
becomes that function's CPU per request: the cgroup's exact CPU accounting sets the scale,
the samples only the split, so the count of samples adds noise to a function's split and
none to the service's total.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from hairline.profile.formats import Profile

__all__ = [
    "OTHER",
    "SELF",
    "TOTAL",
    "FunctionShares",
    "function_metric",
    "function_shares",
    "is_function_row",
    "parse_function_metric",
]

SELF = "self"
TOTAL = "total"
#: The pooled row of every function below the smallest share compared.
OTHER = "(other functions)"
_PREFIX = "fn."


def is_function_row(metric: str) -> bool:
    """Whether an observation's metric is of the profile (a function's cost, or the
    samples of a profiled batch) rather than of the service."""
    return metric.startswith(_PREFIX)


def function_metric(kind: str, function: str) -> str:
    """The observation's metric name of one function's cost: ``fn.self:NAME``."""
    return f"{_PREFIX}{kind}:{function}"


def parse_function_metric(metric: str) -> tuple[str, str] | None:
    """``fn.self:NAME`` -> ("self", "NAME"); None for any other metric."""
    if not metric.startswith(_PREFIX):
        return None
    kind, sep, function = metric[len(_PREFIX) :].partition(":")
    if not sep or kind not in (SELF, TOTAL) or not function:
        return None
    return kind, function


@dataclass(frozen=True)
class FunctionShares:
    """Each function's self and inclusive share of one profile's samples."""

    samples: float
    self_share: Mapping[str, float]
    total_share: Mapping[str, float]
    #: Each function's callers and callees as seen in the stacks (for cost shifts).
    neighbours: Mapping[str, frozenset[str]]

    def rows(self, cpu_ns_per_request: float) -> Iterator[tuple[str, float]]:
        """(metric, ns per request) of every function sampled: its self cost, and its
        inclusive cost where it differs (a function that calls others). A function absent
        from a batch's rows had no sample there: its cost is 0, not unknown."""
        for name, share in sorted(self.self_share.items()):
            yield function_metric(SELF, name), share * cpu_ns_per_request
        for name, share in sorted(self.total_share.items()):
            if share > self.self_share.get(name, 0.0) + 1e-12:
                yield function_metric(TOTAL, name), share * cpu_ns_per_request


def function_shares(profile: Profile) -> FunctionShares:
    """Self and inclusive shares of every function of ``profile`` (its root label
    ignored)."""
    leaf: dict[str, float] = {}
    anywhere: dict[str, float] = {}
    neighbours: dict[str, set[str]] = {}
    total = 0.0
    for (_, frames), count in profile.stacks.items():
        if not frames:
            continue
        total += count
        names = [f.name for f in frames]
        leaf[names[-1]] = leaf.get(names[-1], 0.0) + count
        for name in set(names):
            anywhere[name] = anywhere.get(name, 0.0) + count
        for caller, callee in itertools.pairwise(names):
            if caller != callee:
                neighbours.setdefault(caller, set()).add(callee)
                neighbours.setdefault(callee, set()).add(caller)
    if total <= 0:
        return FunctionShares(0.0, {}, {}, {})
    return FunctionShares(
        samples=total,
        self_share={k: v / total for k, v in leaf.items()},
        total_share={k: v / total for k, v in anywhere.items()},
        neighbours={k: frozenset(v) for k, v in neighbours.items()},
    )
