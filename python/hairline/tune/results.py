"""A tuning run's result (pure): the best configuration with its effect and interval, every
evaluation, the objective over evaluations, and the configuration as a file to deploy.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from typing_extensions import TypedDict

from hairline.kit.jsonout import documented
from hairline.tune.runs import DRIVER_STALE_S, EvaluationRow, RunRow, interrupted_reason
from hairline.tune.space import Configuration, Value

__all__ = ["BestJson", "EvaluationJson", "TuningJson", "TuningResult", "deploy_toml"]


@documented
class BestJson(TypedDict):
    """The evaluation with the best observed objective, when it beats the default."""

    evaluation: int
    """Its number, from 1."""
    config: dict[str, Value]
    """The configuration, by parameter."""
    effect_rel: float | None
    """The objective's relative effect against the default (positive is better)."""
    ci_rel: tuple[float | None, float | None]
    experiment: int | None
    significant: bool
    """Whether its interval excludes no change, in the better direction."""


@documented
class EvaluationJson(TypedDict):
    """One evaluation: a candidate configuration's A/B against the default."""

    evaluation: int
    """Its number, from 1."""
    batch: int
    config: dict[str, Value]
    status: str
    """proposed (also: run again after its arm failed fewer than infeasible_after_failures
    times), running, interrupted (the run stopped while its experiment ran), done,
    infeasible or failed."""
    experiment: int | None
    arm: str
    """The candidate's arm in the experiment ("cN")."""
    value: float | None
    """The objective as the searcher sees it (higher is better)."""
    se: float | None
    """Its standard error."""
    effect_rel: float | None
    ci_rel: tuple[float | None, float | None]
    mean_control: float | None
    mean_candidate: float | None
    reason: str
    """Why it is infeasible, failed, interrupted or run again."""
    candidate_failures: int
    """Experiments in which the candidate's own arm failed and the default's did not."""


@documented
class TuningJson(TypedDict):
    """A tuning run (``hairline tune --json``, ``hairline tuning show RUN --json``;
    docs/tuning.md)."""

    run: int
    name: str
    service: str
    searcher: str
    state: str
    """running, done, failed or refused."""
    reason: str
    metric: str
    """The objective's metric."""
    higher_is_better: bool
    budget: int
    """The evaluations planned."""
    infeasible_after_failures: int
    """Experiments the candidate's own arm must fail before it is infeasible."""
    default: dict[str, Value]
    """The production configuration: the control of every A/B."""
    clusters: dict[str, Any] | None
    """The test and control clusters (Ray backend), or null."""
    aa_experiment: int | None
    """The A/A experiment that cleared the clusters."""
    best: BestJson | None
    """Null when the default is the best known."""
    evaluations: list[EvaluationJson]


@dataclass(frozen=True)
class TuningResult:
    run: RunRow
    evaluations: tuple[EvaluationRow, ...]

    @property
    def metric(self) -> str:
        return str(self.run.summary.get("metric", ""))

    @property
    def higher_is_better(self) -> bool:
        return bool(self.run.summary.get("higher_is_better", False))

    @property
    def default(self) -> Configuration:
        default = self.run.summary.get("default", {})
        return dict(default) if isinstance(default, dict) else {}

    @property
    def budget(self) -> int:
        return int(self.run.summary.get("evaluations", 0))

    @property
    def infeasible_after_failures(self) -> int:
        # Runs started before the rule was configurable marked a candidate at its first.
        return int(self.run.summary.get("infeasible_after_failures", 1))

    def as_seen(self, now: float) -> TuningResult:
        """The run as it stands at ``now``, for a reader (who writes nothing): a "running"
        run whose driver has been silent for ``DRIVER_STALE_S`` was killed, and is shown
        failed; an evaluation still "running" in a run no driver holds is shown
        interrupted (``--resume`` takes it up)."""
        run = self.run
        beat = run.heartbeat_at
        if run.state == "running" and (beat is None or now - beat >= DRIVER_STALE_S):
            silent = "" if beat is None else f" for {now - beat:,.0f} s"
            reason = (
                f"its driver stopped without a word (no sign of life{silent}); "
                f"`hairline tune FILE --resume {run.id}` goes on"
            )
            run = dataclasses.replace(run, state="failed", reason=reason)
        if run.state == "running":  # a live driver: as written
            return self
        evaluations = tuple(
            dataclasses.replace(e, status="interrupted", reason=interrupted_reason(run.id))
            if e.status == "running"
            else e
            for e in self.evaluations
        )
        return TuningResult(run, evaluations)

    @property
    def done(self) -> tuple[EvaluationRow, ...]:
        return tuple(e for e in self.evaluations if e.status == "done" and e.value is not None)

    @property
    def best(self) -> EvaluationRow | None:
        """The evaluation with the best observed objective, if it beats the default (whose
        value is 0 by definition); None: the default is the best known."""
        done = self.done
        if not done:
            return None
        top = max(done, key=lambda e: (e.value or 0.0, -e.position))
        return top if (top.value or 0.0) > 0 else None

    @property
    def best_significant(self) -> bool:
        """Whether the best's interval excludes no change (in the better direction)."""
        best = self.best
        if best is None or best.ci_low is None or best.ci_high is None:
            return False
        return best.ci_low > 0 if self.higher_is_better else best.ci_high < 0

    def best_so_far(self) -> list[tuple[int, float]]:
        """(evaluation number, best value observed up to it), 0 before any beats the
        default; infeasible and failed evaluations carry the best along."""
        best, out = 0.0, []
        for e in self.evaluations:
            if e.status == "done" and e.value is not None:
                best = max(best, e.value)
            out.append((e.position + 1, best))
        return out

    def as_json(self) -> TuningJson:
        best = self.best
        return {
            "run": self.run.id,
            "name": self.run.name,
            "service": self.run.service,
            "searcher": self.run.searcher,
            "state": self.run.state,
            "reason": self.run.reason,
            "metric": self.metric,
            "higher_is_better": self.higher_is_better,
            "budget": self.budget,
            "infeasible_after_failures": self.infeasible_after_failures,
            "default": self.default,
            "clusters": self.run.clusters or None,
            "aa_experiment": self.run.aa_experiment_id,
            "best": None
            if best is None
            else {
                "evaluation": best.position + 1,
                "config": best.config,
                "effect_rel": best.effect_rel,
                "ci_rel": (best.ci_low, best.ci_high),
                "experiment": best.experiment_id,
                "significant": self.best_significant,
            },
            "evaluations": [
                {
                    "evaluation": e.position + 1,
                    "batch": e.batch,
                    "config": e.config,
                    "status": e.status,
                    "experiment": e.experiment_id,
                    "arm": e.arm,
                    "value": e.value,
                    "se": e.se,
                    "effect_rel": e.effect_rel,
                    "ci_rel": (e.ci_low, e.ci_high),
                    "mean_control": e.mean_control,
                    "mean_candidate": e.mean_candidate,
                    "reason": e.reason,
                    "candidate_failures": e.candidate_failures,
                }
                for e in self.evaluations
            ],
        }


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def deploy_toml(result: TuningResult) -> str:
    """The configuration to deploy, as TOML: the best one (or the default when nothing beat
    it), with where it came from in comments."""
    best = result.best
    config = best.config if best is not None else result.default
    lines = [f"# hairline tune: run {result.run.id} ({result.run.name}) of {result.run.service}"]
    if best is None:
        lines.append(f"# nothing beat the default configuration on {result.metric}")
    else:
        interval = ""
        if best.ci_low is not None and best.ci_high is not None:
            interval = f" [{best.ci_low:+.2%}, {best.ci_high:+.2%}]"
        lines.append(
            f"# evaluation {best.position + 1}, experiment {best.experiment_id}: "
            f"{result.metric} {best.effect_rel or 0.0:+.2%}{interval} against the "
            "default"
        )
    lines += ["", "[config]"]
    lines += [f"{name} = {_toml_value(value)}" for name, value in config.items()]
    return "\n".join(lines) + "\n"
