"""An experiment's verdicts and per-trial values as OpenTelemetry gauges (``--otlp``).

Pure: :func:`otlp_batch` turns a report into the gauges, their points and the resource
they describe; report/otlpexport.py sends them. Each point carries the time it stands for:
a verdict the experiment's end, a per-trial value the end of its trial (an export of an
old experiment by ``hairline report`` says when it was measured, not when it was sent).

Names follow OpenTelemetry's conventions where it has them: the resource's
``service.name`` is the service measured, so a backend files the verdicts beside that
service's own telemetry (the instrumentation scope ``hairline`` says who measured); the
commit an arm was built from is ``vcs.ref.head.revision`` (for a verdict its baseline's is
``vcs.ref.base.revision``); the CI pipeline that exported and its repository
(``cicd.pipeline.*``, ``vcs.*``) come from GitHub Actions' or GitLab CI's variables when
they are set. hairline's own attributes are under ``hairline.``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from hairline.lab.analysis import MetricAnalysis
from hairline.report.context import ArmReport, ExperimentReport, metric_trials

__all__ = [
    "TRIAL_VALUE",
    "VERDICT_CODES",
    "VERDICT_GAUGES",
    "Attributes",
    "GaugeSeries",
    "OtlpBatch",
    "Point",
    "arm_commit",
    "ci_attributes",
    "otlp_batch",
]

Attributes = Mapping[str, str | int | bool]

# The verdict as a number, for alert rules and panels (the label is the attribute
# ``hairline.verdict`` as well): 0 no change, 1 regression, 2 improvement, 3 inconclusive.
VERDICT_CODES: Mapping[str, int] = {
    "no change": 0,
    "regression": 1,
    "improvement": 2,
    "inconclusive": 3,
}

# Each verdict gauge: name, unit (UCUM as OTel writes it: "1" for a ratio, "" for the
# metric's own unit, which varies) and description.
VERDICT_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("hairline.verdict.effect", "1",
     "Relative effect of the arm against its baseline (0.02: 2% higher)"),
    ("hairline.verdict.effect.low", "1", "Low end of the relative effect's interval"),
    ("hairline.verdict.effect.high", "1", "High end of the relative effect's interval"),
    ("hairline.verdict.effect_abs", "",
     "Absolute effect of the arm against its baseline, in the metric's unit"),
    ("hairline.verdict.effect_abs.low", "", "Low end of the absolute effect's interval"),
    ("hairline.verdict.effect_abs.high", "", "High end of the absolute effect's interval"),
    ("hairline.verdict.p_value", "1", "The verdict's p-value (adjusted when corrected)"),
    ("hairline.verdict.code", "1",
     "The verdict: 0 no change, 1 regression, 2 improvement, 3 inconclusive"),
)  # fmt: skip
TRIAL_VALUE = (
    "hairline.trial.value",
    "",
    "An arm's mean of a metric in one trial, after the warm-up cut, in the metric's unit",
)

# GitHub Actions' and GitLab CI's variables, each as the attribute it is in OpenTelemetry's
# CI/CD and VCS conventions (both runners set the ones named; None where a value is built).
_GITHUB: tuple[tuple[str, str], ...] = (
    ("cicd.pipeline.name", "GITHUB_WORKFLOW"),
    ("cicd.pipeline.run.id", "GITHUB_RUN_ID"),
    ("cicd.pipeline.task.name", "GITHUB_JOB"),
    ("vcs.ref.base.name", "GITHUB_BASE_REF"),
)
_GITLAB: tuple[tuple[str, str], ...] = (
    ("cicd.pipeline.name", "CI_PIPELINE_NAME"),
    ("cicd.pipeline.run.id", "CI_PIPELINE_ID"),
    ("cicd.pipeline.run.url.full", "CI_PIPELINE_URL"),
    ("cicd.pipeline.task.name", "CI_JOB_NAME"),
    ("cicd.pipeline.task.run.id", "CI_JOB_ID"),
    ("cicd.pipeline.task.run.url.full", "CI_JOB_URL"),
    ("vcs.repository.url.full", "CI_PROJECT_URL"),
    ("vcs.repository.name", "CI_PROJECT_NAME"),
    ("vcs.owner.name", "CI_PROJECT_NAMESPACE"),
    ("vcs.ref.base.name", "CI_MERGE_REQUEST_TARGET_BRANCH_NAME"),
    ("vcs.change.id", "CI_MERGE_REQUEST_IID"),
)
_PULL_REF = re.compile(r"^refs/pull/(\d+)/")
# How an arm built from git is described (lab/build/source.py): "git 1a2b3c4d (main)".
_GIT_SOURCE = re.compile(r"^git ([0-9a-f]{7,40})\b")


@dataclass(frozen=True)
class Point:
    attributes: Attributes
    value: float
    time_unix_nano: int


@dataclass(frozen=True)
class GaugeSeries:
    """One gauge and its points (a point per verdict, or per trial, arm and metric)."""

    name: str
    unit: str
    description: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class OtlpBatch:
    """What one experiment exports: the resource's attributes and the gauges."""

    resource: Attributes
    gauges: tuple[GaugeSeries, ...]

    @property
    def point_count(self) -> int:
        return sum(len(g.points) for g in self.gauges)


def arm_commit(arm: ArmReport) -> str | None:
    """The commit an arm was built from (abbreviated as the build recorded it), or None for
    a folder or the service's own command."""
    found = _GIT_SOURCE.match(arm.source)
    return found.group(1) if found else None


def ci_attributes(environ: Mapping[str, str]) -> dict[str, str]:
    """The CI pipeline and repository ``environ`` describes (GitHub Actions, GitLab CI), as
    OpenTelemetry's ``cicd.*`` and ``vcs.*`` attributes; {} outside CI."""
    found: dict[str, str] = {}
    if environ.get("GITHUB_ACTIONS") == "true":
        for key, variable in _GITHUB:
            if environ.get(variable):
                found[key] = environ[variable]
        server, repository = environ.get("GITHUB_SERVER_URL"), environ.get("GITHUB_REPOSITORY")
        if server and repository:
            found["vcs.repository.url.full"] = f"{server.rstrip('/')}/{repository}"
            owner, _, name = repository.partition("/")
            found["vcs.owner.name"], found["vcs.repository.name"] = owner, name
            if environ.get("GITHUB_RUN_ID"):
                found["cicd.pipeline.run.url.full"] = (
                    f"{server.rstrip('/')}/{repository}/actions/runs/{environ['GITHUB_RUN_ID']}"
                )
        # A pull request's run: its branch is GITHUB_HEAD_REF, its number in GITHUB_REF.
        head = environ.get("GITHUB_HEAD_REF") or environ.get("GITHUB_REF_NAME")
        if head:
            found["vcs.ref.head.name"] = head
        if pull := _PULL_REF.match(environ.get("GITHUB_REF", "")):
            found["vcs.change.id"] = pull.group(1)
        found["vcs.provider.name"] = "github"
    elif environ.get("GITLAB_CI") == "true":
        for key, variable in _GITLAB:
            if environ.get(variable):
                found[key] = environ[variable]
        head = environ.get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME") or environ.get(
            "CI_COMMIT_REF_NAME"
        )
        if head:
            found["vcs.ref.head.name"] = head
        found["vcs.provider.name"] = "gitlab"
    return found


def _nanos(moment: datetime) -> int:
    return round(moment.timestamp() * 1e9)


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _verdict_values(result: MetricAnalysis) -> tuple[float | None, ...]:
    """The values of VERDICT_GAUGES, in their order."""
    c = result.comparison
    return (
        c.effect_rel, c.ci_rel[0], c.ci_rel[1],
        c.effect_abs, c.ci_abs[0], c.ci_abs[1],
        result.verdict.p_adjusted,
        float(VERDICT_CODES[result.verdict.label]),
    )  # fmt: skip


def _with_commit(attributes: dict[str, str | int | bool], key: str, commit: str | None) -> None:
    if commit is not None:
        attributes[key] = commit


def otlp_batch(report: ExperimentReport, environ: Mapping[str, str]) -> OtlpBatch:
    """The gauges of ``report``: a point per verdict (at the experiment's end) and per
    trial, arm and metric (at the trial's end; the experiment's, or its creation, when the
    trial's is unknown); values that are not finite are left out (no point)."""
    commits = {arm.name: arm_commit(arm) for arm in report.arms}
    common: dict[str, str | int | bool] = {
        "hairline.experiment.id": report.experiment_id,
        "hairline.experiment.kind": report.kind,
    }
    ended = report.finished_at or report.started_at or report.created_at
    verdict_points: list[list[Point]] = [[] for _ in VERDICT_GAUGES]
    if report.analysis is not None:
        for result in report.analysis.results:
            attributes = {
                **common,
                "hairline.metric": result.metric,
                "hairline.arm": result.candidate,
                "hairline.baseline": result.baseline,
                "hairline.deciding": report.analysis.decides(result.candidate),
                "hairline.verdict": result.verdict.label,
                "hairline.model": result.model,
            }
            _with_commit(attributes, "vcs.ref.head.revision", commits.get(result.candidate))
            _with_commit(attributes, "vcs.ref.base.revision", commits.get(result.baseline))
            for points, value in zip(verdict_points, _verdict_values(result), strict=True):
                if value is not None and _finite(value):
                    points.append(Point(attributes, float(value), _nanos(ended)))
    trial_points: list[Point] = []
    if report.observations is not None:
        for metric in metric_trials(report.observations, report.analysis):
            for arm, values in metric.by_arm.items():
                for trial in values:
                    if not _finite(trial.value):
                        continue
                    attributes = {**common, "hairline.metric": metric.metric, "hairline.arm": arm}
                    if trial.trial is not None:
                        attributes["hairline.trial"] = trial.trial
                    _with_commit(attributes, "vcs.ref.head.revision", commits.get(arm))
                    at = (
                        report.trial_ended_at.get(trial.trial, ended)
                        if isinstance(trial.trial, int)
                        else ended
                    )
                    trial_points.append(Point(attributes, trial.value, _nanos(at)))
    gauges = [
        GaugeSeries(name, unit, description, tuple(points))
        for (name, unit, description), points in zip(VERDICT_GAUGES, verdict_points, strict=True)
    ]
    gauges.append(GaugeSeries(*TRIAL_VALUE, points=tuple(trial_points)))
    resource: dict[str, str | int | bool] = {
        "service.name": report.service,
        **ci_attributes(environ),
    }
    return OtlpBatch(resource=resource, gauges=tuple(g for g in gauges if g.points))
