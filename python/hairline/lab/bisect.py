"""Bisection: A/B experiments between revisions of a git repository, until the first
revision whose change exceeds the metric's threshold is named (ServiceLab section 3.1).

The experiment file is an ordinary one. Its baseline arm names the repository (``repo``,
default the file's folder) and a revision (``git``, overridden here); both sides of every
step are that arm at two revisions, so a step differs in nothing but the code. The order of
steps is :mod:`hairline.stats.bisection`'s; each runs through the normal lab by the
``run`` function the caller passes (``hairline bisect`` queues it with ``origin="bisect"``
and processes it as ``hairline run`` does), so builds are cached by content and a revision
built for one step is reused by the next.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlalchemy import select
from typing_extensions import TypedDict

from hairline.collect.summary import CPU_PER_REQUEST
from hairline.config import ExperimentConfig
from hairline.errors import ConfigError, HairlineError
from hairline.kit.jsonout import documented
from hairline.lab.build.source import git
from hairline.stats.bisection import (
    OUTCOMES,
    Finished,
    Measured,
    Outcome,
    Status,
    Step,
    experiments_needed,
    next_step,
    stopped,
)
from hairline.store.db import Store
from hairline.store.models import Experiment, VerdictRow

__all__ = [
    "DEFAULT_METRIC",
    "Bisection",
    "BisectionJson",
    "Revision",
    "RevisionJson",
    "StepJson",
    "StepResult",
    "bisect",
    "revisions_between",
    "step_config",
]

DEFAULT_METRIC = CPU_PER_REQUEST.name
# Room for two repeats of inconclusive steps on top of a clean bisection.
_SPARE_EXPERIMENTS = 2

# [design] trials and max_trials go no higher (config/sections.py): repeats stop doubling here.
_MAX_TRIALS = 1000

RunStep = Callable[[ExperimentConfig], int]


@documented
class RevisionJson(TypedDict):
    """A revision: its commit and subject line."""

    commit: str
    subject: str


@documented
class StepJson(TypedDict):
    """One experiment of the bisection and what it found for the metric."""

    experiment: int
    """The experiment's id (``hairline report ID`` has its full report)."""
    purpose: Literal["search", "confirm"]
    attempt: int
    """1, or 2, 3, ... for a repeat of an inconclusive step (with its trials doubled)."""
    trials: int
    baseline: RevisionJson
    candidate: RevisionJson
    verdict: Outcome
    effect_rel: float | None
    ci_rel: tuple[float | None, float | None]
    p_value: float | None
    threshold: str
    """The metric's threshold, e.g. "0.04 rel"."""


@documented
class BisectionJson(TypedDict):
    """A finished bisection (``hairline bisect --json``; docs/bisect.md)."""

    service: str
    metric: str
    status: Status
    reason: str
    culprit: RevisionJson | None
    """The first revision whose change from its parent exceeds the threshold."""
    good: RevisionJson
    bad: RevisionJson
    range: tuple[str, str]
    """(low, high]: the last range the search narrowed to, as commits."""
    revisions: list[RevisionJson]
    """Good first."""
    experiments: int
    steps: list[StepJson]


@dataclass(frozen=True)
class Revision:
    commit: str
    subject: str

    def as_json(self) -> RevisionJson:
        return {"commit": self.commit, "subject": self.subject}


@dataclass(frozen=True)
class StepResult:
    """One experiment of the bisection and what it found for the metric."""

    step: Step
    baseline: Revision
    candidate: Revision
    experiment_id: int
    outcome: Outcome
    effect_rel: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    threshold: str

    @property
    def threshold_text(self) -> str:
        """The threshold as a reader writes it: "5%" (relative) or "0.001" (absolute)."""
        value, _, kind = self.threshold.partition(" ")
        try:
            number = float(value)
        except ValueError:
            return self.threshold
        return f"{number * 100:.4g}%" if kind == "rel" else f"{number:.4g}"

    def as_json(self) -> StepJson:
        return {
            "experiment": self.experiment_id,
            "purpose": self.step.purpose,
            "attempt": self.step.attempt,
            "trials": self.step.trials,
            "baseline": self.baseline.as_json(),
            "candidate": self.candidate.as_json(),
            "verdict": self.outcome,
            "effect_rel": self.effect_rel,
            "ci_rel": (self.ci_low, self.ci_high),
            "p_value": self.p_value,
            "threshold": self.threshold,
        }


@dataclass(frozen=True)
class Bisection:
    """A finished bisection: the revisions (good first), each step, and the end."""

    service: str
    metric: str
    revisions: tuple[Revision, ...]
    steps: tuple[StepResult, ...]
    finished: Finished

    @property
    def culprit(self) -> Revision | None:
        index = self.finished.culprit
        return None if index is None else self.revisions[index]

    def as_json(self) -> BisectionJson:
        end = self.finished
        return {
            "service": self.service,
            "metric": self.metric,
            "status": end.status,
            "reason": end.reason,
            "culprit": None if self.culprit is None else self.culprit.as_json(),
            "good": self.revisions[0].as_json(),
            "bad": self.revisions[-1].as_json(),
            "range": (self.revisions[end.low].commit, self.revisions[end.high].commit),
            "revisions": [r.as_json() for r in self.revisions],
            "experiments": len(self.steps),
            "steps": [s.as_json() for s in self.steps],
        }


def _rev_parse(repo: Path, rev: str, flag: str) -> str:
    found = git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], repo)
    if found.returncode != 0:
        raise ConfigError(
            f"{flag} {rev!r} is not a commit of {repo}",
            hint=f"give {flag} a commit, branch or tag of that repository (`git log` lists them)",
        )
    return found.stdout.strip()


def revisions_between(repo: Path, good: str, bad: str) -> tuple[Revision, ...]:
    """The good revision, then each commit on the bad one's first-parent line after it,
    oldest first, ending with the bad one."""
    good_commit = _rev_parse(repo, good, "--good")
    bad_commit = _rev_parse(repo, bad, "--bad")
    if good_commit == bad_commit:
        raise ConfigError(
            f"--good {good} and --bad {bad} are the same commit",
            hint="give --good a revision before the regression and --bad one after it",
        )
    listed = git(["rev-list", "--reverse", "--first-parent", f"{good_commit}..{bad_commit}"], repo)
    commits = listed.stdout.split()
    parent = git(["rev-parse", f"{commits[0]}^"], repo).stdout.strip() if commits else ""
    if listed.returncode != 0 or parent != good_commit:
        raise ConfigError(
            f"--good {good} is not an ancestor of --bad {bad} on its first-parent history",
            hint="give --good a commit of the branch --bad is on, older than --bad",
        )
    subjects = git(["log", "--no-walk=unsorted", "--format=%H %s", good_commit, *commits], repo)
    pairs = (line.split(" ", 1) for line in subjects.stdout.splitlines())
    return tuple(Revision(p[0], p[1] if len(p) > 1 else "") for p in pairs)


def _base_arm_repo(config: ExperimentConfig) -> Path:
    name = config.baseline_arm
    arm = config.arms[name]
    if arm.git is None or arm.repo is None:
        raise ConfigError(
            f"{config.source}: arms.{name}: the baseline arm names no git revision, so "
            "there is no repository to bisect",
            hint=f'add git = "HEAD" (and repo = "FOLDER" unless it is this file\'s folder) '
            f"to [arms.{name}]; --good and --bad choose the revisions",
        )
    return Path(arm.repo)


def step_config(config: ExperimentConfig, baseline: str, candidate: str, trials: int,
                metric: str) -> ExperimentConfig:  # fmt: skip
    """The file's experiment with its baseline arm at ``baseline`` against the same arm at
    ``candidate``, run with ``trials`` trials (with ``trials = "auto"``: at most that many,
    settled on ``metric``)."""
    base_name = config.baseline_arm
    cand_name = next((n for n in config.arms if n != base_name), "B")
    base = config.arms[base_name]
    arms = {
        base_name: base.model_copy(update={"git": baseline, "baseline": None}),
        cand_name: base.model_copy(update={"git": candidate, "baseline": None}),
    }
    design = config.design
    trials = min(trials, _MAX_TRIALS)
    if design.sequential:
        design = design.model_copy(update={"max_trials": max(trials, 3), "decide_on": [metric]})
    else:
        design = design.model_copy(update={"trials": trials})
    return config.model_copy(update={"arms": arms, "baseline": base_name, "design": design})


def _first_trials(config: ExperimentConfig) -> int:
    return config.design.max_trials if config.design.sequential else int(config.design.trials)


@dataclass(frozen=True)
class _Verdict:
    label: str
    effect_rel: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    threshold: str


class StepFailed(HairlineError):
    """A step's experiment ended without a verdict (its build or its service failed)."""


def _measured(store: Store, experiment_id: int, metric: str) -> _Verdict:
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        if row is None or row.phase != "done":
            phase = "missing" if row is None else row.phase
            failure = "" if row is None or not row.failure else f": {row.failure}"
            raise StepFailed(
                f"step experiment {experiment_id} ended {phase}{failure}",
                hint=f"`hairline report {experiment_id}` shows what happened; the bisection "
                "stops on a failed step",
            )
        rows = session.scalars(
            select(VerdictRow).where(
                VerdictRow.experiment_id == experiment_id, VerdictRow.deciding.is_(True)
            )
        ).all()
        found = [
            _Verdict(r.label, r.relative_effect, r.ci_low, r.ci_high, r.p_value, r.threshold)
            for r in rows
            if r.metric == metric
        ]
        measured = sorted({r.metric for r in rows})
    if not found:
        raise ConfigError(
            f"--metric {metric}: experiment {experiment_id} has no verdict for it",
            hint=f"use one of the metrics it measured: {', '.join(measured) or 'none'}",
        )
    return found[0]


def _outcome(label: str) -> Outcome:
    for outcome in OUTCOMES:
        if outcome == label:
            return outcome
    return "inconclusive"


def bisect(
    config: ExperimentConfig,
    *,
    good: str,
    bad: str,
    run: RunStep,
    store: Store,
    metric: str = DEFAULT_METRIC,
    max_experiments: int | None = None,
    on_event: Callable[[str], None] = lambda line: None,
) -> Bisection:
    """Bisect ``good..bad`` of the repository the baseline arm names. ``run`` takes one
    step's experiment to its end and returns its id; ``on_event`` gets progress lines."""
    if max_experiments is not None and max_experiments < 1:
        raise ConfigError(
            f"--max-experiments {max_experiments}: a bisection runs at least one experiment",
            hint="give --max-experiments 1 or more, or leave it out",
        )
    revisions = revisions_between(_base_arm_repo(config), good, bad)
    budget = max_experiments or experiments_needed(len(revisions)) + _SPARE_EXPERIMENTS
    trials = _first_trials(config)
    on_event(
        f"bisecting {len(revisions) - 1} commits after {revisions[0].commit[:10]} on {metric}: "
        f"at most {experiments_needed(len(revisions))} experiments without repeats, "
        f"budget {budget}"
    )
    done: list[StepResult] = []
    while True:
        step = next_step(
            len(revisions),
            [Measured(r.step, r.outcome) for r in done],
            trials=trials,
            max_experiments=budget,
        )
        if isinstance(step, Finished):
            on_event(f"done: {step.status}: {step.reason}")
            return Bisection(config.service.name, metric, revisions, tuple(done), step)
        try:
            result = _run_step(config, revisions, step, run, store, metric, len(done) + 1,
                               on_event)  # fmt: skip
        except StepFailed as err:
            # Stopped, but reported like any ending: CI gets its JSON, Markdown and JUnit
            # with the steps so far, and the reason.
            reason = f"{err.message} ({err.hint})"
            end = stopped(len(revisions), [Measured(r.step, r.outcome) for r in done], reason)
            on_event(f"stopped: {reason}")
            return Bisection(config.service.name, metric, revisions, tuple(done), end)
        done.append(result)


def _run_step(
    config: ExperimentConfig,
    revisions: Sequence[Revision],
    step: Step,
    run: RunStep,
    store: Store,
    metric: str,
    number: int,
    on_event: Callable[[str], None],
) -> StepResult:
    base, cand = revisions[step.baseline], revisions[step.candidate]
    again = f", attempt {step.attempt}" if step.attempt > 1 else ""
    on_event(
        f"step {number} ({step.purpose}{again}): {cand.commit[:10]} {cand.subject!r} against "
        f"{base.commit[:10]}, {step.trials} trials"
    )
    experiment_id = run(step_config(config, base.commit, cand.commit, step.trials, metric))
    row = _measured(store, experiment_id, metric)
    result = StepResult(
        step=step, baseline=base, candidate=cand, experiment_id=experiment_id,
        outcome=_outcome(row.label), effect_rel=row.effect_rel, ci_low=row.ci_low,
        ci_high=row.ci_high, p_value=row.p_value, threshold=row.threshold,
    )  # fmt: skip
    on_event(f"step {number}: experiment {experiment_id}: {result.outcome}{_effect_text(result)}")
    return result


def _effect_text(result: StepResult) -> str:
    if result.effect_rel is None:
        return ""
    interval = ""
    if result.ci_low is not None and result.ci_high is not None:
        interval = f" [{result.ci_low:+.1%}, {result.ci_high:+.1%}]"
    return f" {result.effect_rel:+.1%}{interval} (threshold {result.threshold_text})"
