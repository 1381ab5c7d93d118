"""What one evaluation's A/B found, as the searcher's observation: the objective's relative
effect in its better direction with its standard error (as Ax users feed a trial: effect and
SE against the status quo), or why the candidate is infeasible.

A failed experiment is the candidate's fault only when the failure names the candidate's
arm and not the default's (``blamed_arms``): a default that could not carry the load says
nothing of the candidate. Even then one failure is not enough to bar a configuration for
the rest of the run (infeasible candidates are never proposed again, so a false
"infeasible" costs the search that part of the space): the loop runs it again until its
arm has failed in ``infeasible_after_failures`` experiments (``settle``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from hairline.lab.analysis import MetricAnalysis
from hairline.lab.results import load_analysis
from hairline.stats import dist
from hairline.store.db import Store
from hairline.store.models import Arm, Experiment
from hairline.tune.apply import CONTROL_ARM
from hairline.tune.config import LimitTable, TuningSpec

__all__ = ["Found", "blamed_arms", "read_outcome", "settle"]


@dataclass(frozen=True)
class Found:
    """``status``: done, infeasible (the candidate's fault, measured: a constraint broken or
    the objective not measured; never proposed again), arm_failed (the experiment failed on
    the candidate's arm alone: counted, see ``settle``), proposed (it failed on another
    candidate's arm in a shared-control experiment: run again, not counted) or failed (the
    experiment's: the run stops, and a resumed run tries it again)."""

    status: str
    reason: str = ""
    value: float | None = None
    se: float | None = None
    effect_rel: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    mean_control: float | None = None
    mean_candidate: float | None = None

    def columns(self) -> dict[str, float | str | None]:
        return {
            "reason": self.reason,
            "value": self.value,
            "se": self.se,
            "effect_rel": self.effect_rel,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "mean_control": self.mean_control,
            "mean_candidate": self.mean_candidate,
        }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def read_outcome(store: Store, spec: TuningSpec, experiment_id: int, arm: str) -> Found:
    """The evaluation of candidate arm ``arm`` in an ended experiment."""
    with store.transaction() as session:
        row = session.get(Experiment, experiment_id)
        phase = "missing" if row is None else row.phase
        failure = "" if row is None else row.failure or ""
        artifacts = "" if row is None else row.artifacts_dir
        arms = session.scalars(select(Arm.name).where(Arm.experiment_id == experiment_id)).all()
    if phase != "done":
        # The lab names an arm that would not start or answer ("arm c3: ...", "arm c3 was
        # not running ...") and the target that fell furthest behind the load ("target c3
        # got 7.10% off its scheduled rate").
        named = blamed_arms(failure, {arm, CONTROL_ARM, *arms})
        if phase == "failed" and arm in named and CONTROL_ARM not in named:
            return Found("arm_failed", reason=f"experiment {experiment_id}: {failure}")
        if phase == "failed" and named and CONTROL_ARM not in named:
            # Another candidate's arm failed in a shared-control experiment: not this one's
            # fault, and nothing to stop the run for.
            others = ", ".join(sorted(named))
            return Found("proposed", reason=f"experiment {experiment_id} failed on the arm of "
                         f"{others}, not this candidate's: run again")  # fmt: skip
        whose = ""
        if CONTROL_ARM in named:
            whose = f" (on the {CONTROL_ARM} arm: not the candidate's fault)"
        return Found("failed", reason=f"experiment {experiment_id} ended {phase}{whose}: {failure}")
    analysis = load_analysis(Path(artifacts))
    results = (
        {} if analysis is None else {r.metric: r for r in analysis.results if r.candidate == arm}
    )
    found = results.get(spec.metric)
    if found is None:
        return Found("failed", reason=f"experiment {experiment_id} has no {spec.metric} for {arm}")
    broken = _broken_constraints(spec.constraints, results)
    measured = _observation(spec, found, analysis.alpha if analysis else 0.05)
    if broken:
        return dataclasses.replace(measured, status="infeasible", reason=broken)
    if measured.value is None:
        return dataclasses.replace(
            measured,
            status="infeasible",
            reason=f"{spec.metric} was not measured for the candidate (no finite effect)",
        )
    return measured


def _observation(spec: TuningSpec, found: MetricAnalysis, alpha: float) -> Found:
    c = found.comparison
    effect = _finite(c.effect_rel)
    low, high = (_finite(c.ci_rel[0]), _finite(c.ci_rel[1]))
    se = None
    if low is not None and high is not None:
        # The interval is the model's at level alpha: its half-width over z is the SE.
        se = (high - low) / (2 * float(dist.norm_ppf(1 - alpha / 2)))
    value = None if effect is None else (effect if spec.higher_is_better else -effect)
    return Found(
        status="done",
        value=value,
        se=se,
        effect_rel=effect,
        ci_low=low,
        ci_high=high,
        mean_control=_finite(c.mean_a),
        mean_candidate=_finite(c.mean_b),
    )


def _broken_constraints(limits: dict[str, LimitTable], results: dict[str, MetricAnalysis]) -> str:
    broken: list[str] = []
    for metric, limit in limits.items():
        found = results.get(metric)
        if found is None:
            broken.append(f"{metric} was not measured, so its constraint cannot be checked")
            continue
        mean = found.comparison.mean_b
        if limit.max is not None and not mean <= limit.max:
            broken.append(f"{metric} {mean:,.4g} is above its max {limit.max:,.4g}")
        if limit.min is not None and not mean >= limit.min:
            broken.append(f"{metric} {mean:,.4g} is below its min {limit.min:,.4g}")
    return "; ".join(broken)


def blamed_arms(failure: str, arms: Iterable[str]) -> set[str]:
    """The arms among ``arms`` that an experiment's failure message names as failing: an arm
    that would not start ("arm c3: ..."), crashed, restarted, answered with errors or read
    impossible CPU ("arm c3 ..."), or the load gate's worst target ("target c3 got ...").
    The hypervisor's steal gap ("... of arm c3's CPU time") is the machine's, not the
    arm's, and names no one."""
    return {
        name
        for name in arms
        if f"arm {name}:" in failure or f"arm {name} " in failure or f"target {name} got" in failure
    }


def settle(found: Found, failures_before: int, infeasible_after: int) -> tuple[Found, int]:
    """What an evaluation becomes after ``found``, and its count of experiments in which the
    candidate's arm failed: an ``arm_failed`` below ``infeasible_after`` failures is
    ``proposed`` again (run in a new experiment); at it, infeasible, with the rule in its
    reason. Anything else stands as found."""
    if found.status != "arm_failed":
        return found, failures_before
    failures = failures_before + 1
    rule = f"infeasible_after_failures = {infeasible_after}"
    if failures >= infeasible_after:
        reason = (
            f"infeasible: its arm failed (and the {CONTROL_ARM} arm did not) in {failures} "
            f"experiments ({rule}); the last: {found.reason}"
        )
        return Found("infeasible", reason=reason), failures
    reason = (
        f"its arm failed in {failures} of the {infeasible_after} experiments that make it "
        f"infeasible ({rule}); run again. The last: {found.reason}"
    )
    return Found("proposed", reason=reason), failures
