"""An experiment as OpenTelemetry gauges (report/otlp.py): a point per verdict at the
experiment's end and per trial at the trial's end, the commits and the CI pipeline in
OpenTelemetry's own attribute names."""

from __future__ import annotations

import dataclasses
import importlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_markdown import report

from hairline.report.context import ArmReport, metric_trials
from hairline.report.otlp import (
    TRIAL_VALUE,
    VERDICT_CODES,
    VERDICT_GAUGES,
    OtlpBatch,
    arm_commit,
    ci_attributes,
    otlp_batch,
)

ENDED = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)

GITHUB_PULL_REQUEST = {
    "GITHUB_ACTIONS": "true",
    "GITHUB_WORKFLOW": "perf",
    "GITHUB_RUN_ID": "9753949763",
    "GITHUB_JOB": "hairline",
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "acme/checkout",
    "GITHUB_REF": "refs/pull/1075/merge",
    "GITHUB_REF_NAME": "1075/merge",
    "GITHUB_HEAD_REF": "faster-json",
    "GITHUB_BASE_REF": "main",
}
GITLAB_MERGE_REQUEST = {
    "GITLAB_CI": "true",
    "CI_PIPELINE_ID": "1234",
    "CI_PIPELINE_URL": "https://gitlab.example/acme/checkout/-/pipelines/1234",
    "CI_JOB_NAME": "perf",
    "CI_JOB_ID": "99",
    "CI_JOB_URL": "https://gitlab.example/acme/checkout/-/jobs/99",
    "CI_PROJECT_URL": "https://gitlab.example/acme/checkout",
    "CI_PROJECT_NAME": "checkout",
    "CI_PROJECT_NAMESPACE": "acme",
    "CI_COMMIT_REF_NAME": "faster-json",
    "CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "faster-json",
    "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main",
    "CI_MERGE_REQUEST_IID": "17",
}


def trial_end(trial: int) -> datetime:
    return ENDED - timedelta(minutes=6 - trial)


def batch_of(tmp_path: Path, environ: dict[str, str] | None = None) -> OtlpBatch:
    """A finished A/B (test_markdown's: B 3% more CPU per request, six trials) with each
    trial ending a minute after the one before."""
    ended = report(tmp_path, cpu_effect=0.03, seed=1)
    return otlp_batch(
        dataclasses.replace(
            ended,
            finished_at=ENDED,
            trial_ended_at={t: trial_end(t) for t in range(6)},
        ),
        environ or {},
    )


def points(batch: OtlpBatch, name: str) -> dict[tuple[object, ...], tuple[float, int]]:
    """A gauge's points by (metric, arm, trial): (value, time in ns)."""
    (gauge,) = [g for g in batch.gauges if g.name == name]
    return {
        (p.attributes["hairline.metric"], p.attributes["hairline.arm"],
         p.attributes.get("hairline.trial")): (p.value, p.time_unix_nano)
        for p in gauge.points
    }  # fmt: skip


def test_each_verdict_is_a_point_of_each_gauge_at_the_experiments_end(tmp_path: Path) -> None:
    """False failure: none: seeded rngs (test_markdown's report)."""
    batch = batch_of(tmp_path)
    analysed = report(tmp_path, cpu_effect=0.03, seed=1).analysis
    assert analysed is not None
    at = int(ENDED.timestamp() * 1e9)
    for result in analysed.results:
        key = (result.metric, result.candidate, None)
        c = result.comparison
        assert points(batch, "hairline.verdict.effect")[key] == (c.effect_rel, at)
        assert points(batch, "hairline.verdict.effect.low")[key] == (c.ci_rel[0], at)
        assert points(batch, "hairline.verdict.effect.high")[key] == (c.ci_rel[1], at)
        assert points(batch, "hairline.verdict.effect_abs")[key] == (c.effect_abs, at)
        assert points(batch, "hairline.verdict.p_value")[key] == (result.verdict.p_adjusted, at)
        code = float(VERDICT_CODES[result.verdict.label])
        assert points(batch, "hairline.verdict.code")[key] == (code, at)
    (code_gauge,) = [g for g in batch.gauges if g.name == "hairline.verdict.code"]
    (cpu,) = [
        p for p in code_gauge.points if p.attributes["hairline.metric"] == "cpu_ns_per_request"
    ]
    assert cpu.value == 1.0 and cpu.attributes["hairline.verdict"] == "regression"
    assert cpu.attributes["hairline.baseline"] == "A"
    assert cpu.attributes["hairline.deciding"] is True
    assert cpu.attributes["hairline.experiment.id"] == 42
    assert cpu.attributes["hairline.experiment.kind"] == "ab"
    # A was built from git 1a2b3c4, B from a folder: only the base's commit is known.
    assert cpu.attributes["vcs.ref.base.revision"] == "1a2b3c4"
    assert "vcs.ref.head.revision" not in cpu.attributes
    assert batch.resource == {"service.name": "checkout"}


def test_each_trials_value_is_a_point_at_that_trials_end(tmp_path: Path) -> None:
    """False failure: none: seeded rngs."""
    batch = batch_of(tmp_path)
    ended = report(tmp_path, cpu_effect=0.03, seed=1)
    assert ended.observations is not None
    trial_points = points(batch, TRIAL_VALUE[0])
    expected = {
        (m.metric, arm, v.trial): (v.value, round(trial_end(v.trial).timestamp() * 1e9))
        for m in metric_trials(ended.observations, ended.analysis)
        for arm, values in m.by_arm.items()
        for v in values
        if isinstance(v.trial, int)
    }  # fmt: skip
    assert len(expected) == 2 * 2 * 6
    assert trial_points == expected
    (gauge,) = [g for g in batch.gauges if g.name == TRIAL_VALUE[0]]
    a_points = [p for p in gauge.points if p.attributes["hairline.arm"] == "A"]
    assert {p.attributes["vcs.ref.head.revision"] for p in a_points} == {"1a2b3c4"}


def test_a_failed_experiment_exports_what_it_measured_and_no_verdict(tmp_path: Path) -> None:
    """False failure: none: seeded rngs."""
    ended = dataclasses.replace(
        report(tmp_path, cpu_effect=0.03, seed=1), phase="failed", analysis=None
    )
    batch = otlp_batch(ended, {})
    assert [g.name for g in batch.gauges] == [TRIAL_VALUE[0]]


def test_a_github_pull_requests_run_is_named_in_cicd_and_vcs_attributes() -> None:
    assert ci_attributes(GITHUB_PULL_REQUEST) == {
        "cicd.pipeline.name": "perf",
        "cicd.pipeline.run.id": "9753949763",
        "cicd.pipeline.run.url.full": "https://github.com/acme/checkout/actions/runs/9753949763",
        "cicd.pipeline.task.name": "hairline",
        "vcs.repository.url.full": "https://github.com/acme/checkout",
        "vcs.owner.name": "acme",
        "vcs.repository.name": "checkout",
        "vcs.ref.head.name": "faster-json",
        "vcs.ref.base.name": "main",
        "vcs.change.id": "1075",
        "vcs.provider.name": "github",
    }


def test_a_push_on_github_names_its_branch_and_no_change() -> None:
    pull_only = ("GITHUB_HEAD_REF", "GITHUB_BASE_REF")
    push = {k: v for k, v in GITHUB_PULL_REQUEST.items() if k not in pull_only}
    found = ci_attributes({**push, "GITHUB_REF": "refs/heads/main", "GITHUB_REF_NAME": "main"})
    assert found["vcs.ref.head.name"] == "main"
    assert "vcs.change.id" not in found and "vcs.ref.base.name" not in found


def test_a_gitlab_merge_requests_pipeline_is_named_too() -> None:
    found = ci_attributes(GITLAB_MERGE_REQUEST)
    assert found["cicd.pipeline.run.id"] == "1234"
    assert found["cicd.pipeline.task.run.url.full"].endswith("/-/jobs/99")
    assert found["vcs.change.id"] == "17" and found["vcs.ref.base.name"] == "main"
    assert found["vcs.ref.head.name"] == "faster-json" and found["vcs.provider.name"] == "gitlab"
    assert "cicd.pipeline.name" not in found  # CI_PIPELINE_NAME is unset: nothing invented


def test_outside_ci_nothing_is_guessed() -> None:
    assert ci_attributes({"HOME": "/root", "GITHUB_SHA": "abc"}) == {}


def _semconv_attribute_names() -> set[str]:
    """The attribute names of OpenTelemetry's service, CI/CD and VCS conventions (the last
    two still "incubating" in the package)."""
    names: set[str] = set()
    for module in (
        "opentelemetry.semconv.attributes.service_attributes",
        "opentelemetry.semconv._incubating.attributes.cicd_attributes",
        "opentelemetry.semconv._incubating.attributes.vcs_attributes",
    ):
        found = importlib.import_module(module)
        names |= {v for k, v in vars(found).items() if k.isupper() and isinstance(v, str)}
    return names


def test_every_attribute_not_hairlines_own_is_an_opentelemetry_convention(tmp_path: Path) -> None:
    """The names come from OpenTelemetry's semantic conventions (the package the SDK
    installs), so a backend's CI/CD and VCS views find them."""
    batch = batch_of(tmp_path, {**GITHUB_PULL_REQUEST})
    used = set(batch.resource) | {k for g in batch.gauges for p in g.points for k in p.attributes}
    used |= set(ci_attributes(GITLAB_MERGE_REQUEST))
    foreign = {k for k in used if not k.startswith("hairline.")}
    assert {"service.name", "vcs.ref.base.revision", "vcs.change.id"} <= foreign
    assert foreign - _semconv_attribute_names() == set()


@pytest.mark.parametrize(
    ("source", "commit"),
    [("git 1a2b3c4d (main)", "1a2b3c4d"), ("git 0123abcd", "0123abcd"),
     ("path /src/checkout", None), ("same as A", None), ("git main (unresolved)", None)],
)  # fmt: skip
def test_an_arms_commit_is_the_one_its_build_recorded(source: str, commit: str | None) -> None:
    assert arm_commit(ArmReport("B", source, None, None, None)) == commit


def test_the_gauges_are_named_in_opentelemetrys_style() -> None:
    """Lower case, dot-separated namespaces, hairline's own prefix; a ratio's unit is "1"."""
    for name, unit, description in (*VERDICT_GAUGES, TRIAL_VALUE):
        assert name.startswith("hairline.") and name == name.lower() and " " not in name
        assert unit in ("1", "") and description
