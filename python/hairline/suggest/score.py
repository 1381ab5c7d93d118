"""Impact scores (ServiceLab section 3.1), pure: what the functions a diff modifies cost in
production, which endpoints run them and in what share, and which diffs to test.

A function's impact is its inclusive cost in the profile: every stack that holds it, once
even when it recurses (samples x period = how often it runs x what a run costs). A diff's
impact is the cost of the stacks that hold any function it modifies, each stack once, so two
modified functions on one stack are not counted twice. Each endpoint's share is its part of
that cost: what the replay should spend on it.

A frame is a function's when its name is the function's qualified name, or ends with it at
a separator (pprof puts Go's import path first; a Rust symbol its crate path and hash), or
is its tail with at least the module left (``search.Index.lookup``); when the profile names
the frame's file, that file must end the function's path (or the reverse), so functions
of one name in two files are told apart (the file's name and its folder must agree, since a
deployed path starts elsewhere than the repository's). Renamed functions match under either name.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from hairline.errors import ConfigError
from hairline.profile.formats import Frame, Profile
from hairline.profile.names import ends_at_separator, name_parts, plain_name
from hairline.suggest.changes import ChangedFunction

__all__ = [
    "DiffImpact",
    "EndpointShare",
    "FunctionImpact",
    "ScoreThreshold",
    "decide",
    "frame_matches",
    "impact",
    "parse_score_threshold",
    "within_budget",
]


def _same_file(path: str, file: str) -> bool:
    # The deployed path differs from the repository's in its start (/srv/, src/): the file's
    # name and its folder must agree (the name alone where either has no folder).
    a, b = path.strip("/").split("/"), file.strip("/").split("/")
    n = min(len(a), len(b), 2)
    return a[-n:] == b[-n:]


def frame_matches(function: ChangedFunction, frame: Frame) -> bool:
    """Whether the profile's ``frame`` is ``function`` (under its head or base name)."""
    name = plain_name(frame.name)
    if frame.file and not any(_same_file(p, frame.file) for p in function.paths):
        return False
    for qualified in function.names:
        if ends_at_separator(name, qualified):
            return True
        # A shorter form: the file pins it down, or it keeps at least one module part.
        if ends_at_separator(qualified, name) and (
            frame.file or name_parts(name) > name_parts(function.local or qualified)
        ):
            return True
    return False


@dataclass(frozen=True)
class FunctionImpact:
    function: ChangedFunction
    cost: float  # inclusive: the stacks holding it, each once
    self_cost: float  # the stacks it is the leaf of
    endpoints: dict[str, float]  # inclusive cost per endpoint

    def share(self, total: float) -> float:
        return self.cost / total if total > 0 else 0.0


@dataclass(frozen=True)
class EndpointShare:
    endpoint: str
    cost: float  # the diff's affected cost in this endpoint
    share: float  # of the diff's affected cost: the replay's weight
    endpoint_cost: float  # the endpoint's whole cost in the profile

    @property
    def fraction(self) -> float:
        """How much of the endpoint's own cost the modified code is."""
        return self.cost / self.endpoint_cost if self.endpoint_cost > 0 else 0.0


@dataclass(frozen=True)
class DiffImpact:
    functions: tuple[FunctionImpact, ...]  # every changed function, scored or not
    cost: float  # the stacks holding any scored function, each once
    total: float  # the whole profile
    unit: str
    endpoints: tuple[EndpointShare, ...]  # by cost, largest first

    @property
    def share(self) -> float:
        """The diff's impact as a share of all production cost in the profile."""
        return self.cost / self.total if self.total > 0 else 0.0

    @property
    def matched(self) -> tuple[FunctionImpact, ...]:
        return tuple(f for f in self.functions if f.cost > 0 and f.function.scored)


def impact(profile: Profile, functions: Sequence[ChangedFunction]) -> DiffImpact:
    """The impact of each function and of the diff that changes them all."""
    owners: dict[Frame, tuple[int, ...]] = {}

    def owners_of(frame: Frame) -> tuple[int, ...]:
        if frame not in owners:
            owners[frame] = tuple(i for i, f in enumerate(functions) if frame_matches(f, frame))
        return owners[frame]

    inclusive = [0.0] * len(functions)
    leaf = [0.0] * len(functions)
    per_endpoint: list[dict[str, float]] = [{} for _ in functions]
    affected: dict[str, float] = {}
    for (endpoint, frames), cost in profile.stacks.items():
        held = {i for frame in frames for i in owners_of(frame)}
        for i in held:
            inclusive[i] += cost
            per_endpoint[i][endpoint] = per_endpoint[i].get(endpoint, 0.0) + cost
        if frames:
            for i in owners_of(frames[-1]):
                leaf[i] += cost
        if any(functions[i].scored for i in held):
            affected[endpoint] = affected.get(endpoint, 0.0) + cost
    cost = sum(affected.values())
    totals = profile.endpoint_totals()
    endpoints = tuple(
        EndpointShare(e, c, c / cost, totals[e])
        for e, c in sorted(affected.items(), key=lambda item: (-item[1], item[0]))
    )
    return DiffImpact(
        functions=tuple(
            FunctionImpact(f, inclusive[i], leaf[i], per_endpoint[i])
            for i, f in enumerate(functions)
        ),
        cost=cost,
        total=profile.total,
        unit=profile.unit,
        endpoints=endpoints,
    )


@dataclass(frozen=True)
class ScoreThreshold:
    """The least impact worth an experiment: a share of the profile, or a cost."""

    value: float
    relative: bool
    text: str

    def passed_by(self, diff: DiffImpact) -> bool:
        return (diff.share if self.relative else diff.cost) >= self.value


def parse_score_threshold(text: str) -> ScoreThreshold:
    """``0.001`` or ``0.1%``: a share of the whole profile's cost; a number above 1 (``5e6``):
    a cost in the profile's unit."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1] if percent else raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (percent and value > 100):
        raise ConfigError(
            f"--threshold {text!r} is not a share or a cost",
            hint="give a share of the profile's cost (0.001 or 0.1%) or a cost above 1 in "
            "the profile's unit (e.g. 5e6 nanoseconds)",
        )
    if percent:
        return ScoreThreshold(value / 100, True, text)
    return ScoreThreshold(value, value <= 1, text)


def decide(diff: DiffImpact, threshold: ScoreThreshold) -> tuple[bool, str]:
    """Whether to test the diff, and why, in words."""
    if not diff.matched:
        return False, "no function the diff modifies appears in the profile"
    if threshold.relative:
        said = f"{diff.share:.4%} of the profile's cost"
        limit = f"{threshold.value:.4%}"
    else:
        said = f"{diff.cost:,.6g} {diff.unit}"
        limit = f"{threshold.value:,.6g} {diff.unit}"
    if threshold.passed_by(diff):
        return True, f"impact {said} is at least the threshold {limit}"
    return False, f"impact {said} is below the threshold {limit}"


_K = TypeVar("_K", bound=Hashable)


def within_budget(
    scores: Sequence[tuple[_K, float]], *, budget_h: float, per_test_h: float
) -> list[_K]:
    """The diffs with the highest scores whose experiments fit ``budget_h`` machine-hours
    at ``per_test_h`` each, best first; a diff that scores nothing is never chosen."""
    if per_test_h <= 0:
        raise ConfigError(
            f"an experiment costs {per_test_h:g} machine-hours",
            hint="give --hours-per-test above 0, or an experiment file with trials and a duration",
        )
    room = int(budget_h // per_test_h + 1e-9)
    ranked = sorted(
        ((key, score) for key, score in scores if score > 0),
        key=lambda item: -item[1],
    )
    return [key for key, _ in ranked[:room]]
