"""One diff suggested (functions, impact, decision) and an experiment narrowed to it: what
``hairline suggest`` prints and what ``hairline run --suggested-by`` runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from typing_extensions import TypedDict

from hairline.config import ExperimentConfig
from hairline.config.suggest import SuggestConfig, SuggestedMix
from hairline.errors import ConfigError
from hairline.kit.jsonout import documented
from hairline.profile.formats import Profile, merge, read_profile
from hairline.suggest.changes import DiffFunctions, modified_functions
from hairline.suggest.mix import remix
from hairline.suggest.score import (
    DiffImpact,
    ScoreThreshold,
    decide,
    impact,
    parse_score_threshold,
)

__all__ = [
    "ChosenSuggestionJson",
    "Suggestion",
    "SuggestionJson",
    "SuggestionsJson",
    "hours_per_test",
    "read_profiles",
    "suggest",
    "suggested_experiment",
    "suggestion_json",
]


@dataclass(frozen=True)
class Suggestion:
    base: str
    head: str
    changed: DiffFunctions
    impact: DiffImpact
    test: bool
    reason: str


def read_profiles(paths: Sequence[Path], *, endpoint_label: str = "endpoint") -> Profile:
    if not paths:
        raise ConfigError(
            "no profile of production given",
            hint="pass --profile FILE (folded stacks or pprof), or [suggest] profiles = [...]",
        )
    return merge([read_profile(p, endpoint_label=endpoint_label) for p in paths])


def no_function_reason(changed: DiffFunctions, base: str, head: str) -> str:
    """Why a diff gives no function to score, in its own words: an empty diff, files of
    languages not read (Python, Go and Rust are), or lines outside every function."""
    others = ", ".join(changed.other_files[:3]) + (", ..." if len(changed.other_files) > 3 else "")
    if not changed.other_files and not changed.unmapped_lines:
        return f"the diff is empty: {head} changes no line against {base}"
    if not changed.unmapped_lines:
        return (
            f"the diff changes only files of languages not read here ({others}); "
            "Python, Go and Rust are"
        )
    lines = f"{changed.unmapped_lines} line{'s' if changed.unmapped_lines != 1 else ''}"
    also = f", and files of languages not read here ({others})" if changed.other_files else ""
    return f"the diff changes {lines} outside every function and no function{also}"


def suggest(
    repo: Path, base: str, head: str, profile: Profile, threshold: ScoreThreshold | None
) -> Suggestion:
    """The functions ``head`` modifies against ``base``, their impact, and whether to test."""
    changed = modified_functions(repo, base, head)
    diff = impact(profile, changed.functions)
    if not changed.functions:
        test, reason = False, no_function_reason(changed, base, head)
    elif threshold is None:
        test, reason = bool(diff.matched), (
            "the modified code runs in production" if diff.matched else
            "no function the diff modifies appears in the profile"
        )  # fmt: skip
    else:
        test, reason = decide(diff, threshold)
    return Suggestion(base, head, changed, diff, test, reason)


@documented
class SuggestedFunctionJson(TypedDict):
    """A function the diff touches, and its cost in production."""

    name: str
    """Its head name (its base name when deleted)."""
    path: str
    change: Literal["modified", "added", "deleted", "renamed"]
    old_name: str | None
    """Its base name when that differs (renamed or moved)."""
    scored: bool
    """Whether its production cost counts (a pure rename runs the same code)."""
    cost: float
    """Inclusive: the profile's stacks holding it, each once."""
    self_cost: float
    """The stacks it is the leaf of."""
    share: float
    """``cost`` as a share of the whole profile."""
    endpoints: dict[str, float]
    """Inclusive cost per endpoint."""


@documented
class SuggestedEndpointJson(TypedDict):
    """An endpoint the change reaches."""

    endpoint: str
    cost: float
    """The diff's affected cost in this endpoint."""
    share: float
    """Of the diff's affected cost: the replay's weight."""
    fraction: float
    """Of the endpoint's whole cost."""


@documented
class SuggestionJson(TypedDict):
    """One diff suggested: its functions, their production impact, and whether to test it
    (``hairline suggest --json``; docs/suggest.md)."""

    base: str
    head: str
    test: bool
    """Whether the change is worth an experiment."""
    reason: str
    unit: str
    """The profile's unit (samples, ns, ...)."""
    profile_cost: float
    """The whole profile's cost."""
    cost: float
    """The stacks holding any scored function, each once."""
    share: float
    """``cost`` as a share of the profile's."""
    functions: list[SuggestedFunctionJson]
    endpoints: list[SuggestedEndpointJson]
    """By cost, largest first."""
    unmapped_lines: int
    """Changed lines of read files outside every function."""
    other_files: list[str]
    """Changed files of languages not read."""


@documented
class ChosenSuggestionJson(SuggestionJson):
    """One of several diffs, and whether it fits the budget."""

    chosen: bool


@documented
class SuggestionsJson(TypedDict):
    """Several diffs ranked against a budget (``hairline suggest --diffs FILE --json``)."""

    budget_machine_hours: float
    hours_per_test: float
    diffs: list[ChosenSuggestionJson]


def suggestion_json(s: Suggestion) -> SuggestionJson:
    diff = s.impact
    return {
        "base": s.base,
        "head": s.head,
        "test": s.test,
        "reason": s.reason,
        "unit": diff.unit,
        "profile_cost": diff.total,
        "cost": diff.cost,
        "share": diff.share,
        "functions": [
            {
                "name": f.function.name,
                "path": f.function.path,
                "change": f.function.change,
                "old_name": f.function.old_name,
                "scored": f.function.scored,
                "cost": f.cost,
                "self_cost": f.self_cost,
                "share": f.share(diff.total),
                "endpoints": f.endpoints,
            }
            for f in diff.functions
        ],
        "endpoints": [
            {"endpoint": e.endpoint, "cost": e.cost, "share": e.share, "fraction": e.fraction}
            for e in diff.endpoints
        ],
        "unmapped_lines": s.changed.unmapped_lines,
        "other_files": list(s.changed.other_files),
    }


def hours_per_test(config: ExperimentConfig) -> float:
    """Machine-hours one experiment of ``config`` holds: its trials x (warm-up + duration)
    x its arms (each arm a host), twice for the fully balanced design's two batches."""
    batches = 2 if config.design.schedule == "fully-balanced" else 1
    seconds = config.load.warmup_duration_s + config.load.duration_s
    return config.design.planned_trials * batches * seconds * len(config.arms) / 3600.0


def _resolved(config: ExperimentConfig, head: str | None) -> tuple[SuggestConfig, Path]:
    table = config.suggest or SuggestConfig()
    if head is not None:
        table = table.model_copy(update={"head": head})
    if table.head is None:
        raise ConfigError(
            "no revision to suggest for",
            hint="pass `hairline run FILE --suggested-by REV`, or [suggest] head = REV",
        )
    here = Path(config.source).parent if config.source else Path.cwd()
    return table, here


def suggested_experiment(
    config: ExperimentConfig,
    *,
    head: str | None,
    out_dir: Path,
    profiles: Sequence[Path] = (),
    repo: Path | None = None,
    base: str | None = None,
    seed: int = 0,
) -> tuple[ExperimentConfig | None, Suggestion]:
    """``config`` with its trace narrowed to the endpoints ``head`` reaches (written in
    ``out_dir``) and the reason in ``[suggest] why``; None when there is nothing to test.
    Flags (``profiles``, ``repo``, ``base``) stand before the file's ``[suggest]``."""
    table, here = _resolved(config, head)
    head_rev = str(table.head)
    base_rev = base or table.base or f"{head_rev}^"
    where = repo or (here / table.repo)
    paths = list(profiles) or [here / p for p in table.profiles]
    profile = read_profiles(paths, endpoint_label=table.endpoint_label)
    threshold = parse_score_threshold(table.threshold) if table.threshold else None
    s = suggest(where, base_rev, head_rev, profile, threshold)
    if not s.test:
        return None, s
    key = hashlib.sha256(f"{config.trace}\0{base_rev}\0{head_rev}".encode()).hexdigest()[:12]
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"{config.service.name}-{key}.jsonl"
    _, why = remix(
        Path(config.trace), s.impact, out=out, base=base_rev, head=head_rev,
        count=table.count, seed=seed,
    )  # fmt: skip
    narrowed: SuggestedMix = why
    updated = table.model_copy(update={"why": narrowed, "base": base_rev, "head": head_rev})
    return config.model_copy(update={"trace": str(out), "suggest": updated}), s
