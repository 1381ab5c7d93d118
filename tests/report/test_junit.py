"""JUnit XML of an experiment and of a bisection: one case per verdict, the gate's rules for
what fails, and every document valid against docs/schema/junit.xsd."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from test_bisect_report import FOUND, REVISIONS
from test_markdown import report

from hairline.lab.bisect import Bisection
from hairline.report.context import ExperimentReport
from hairline.report.junit import render_bisection_junit, render_junit
from hairline.stats.bisection import Finished

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[2] / "docs" / "schema" / "junit.xsd")


def cases(xml: str) -> dict[str, ET.Element]:
    SCHEMA.validate(xml)
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None
    return {c.get("name", ""): c for c in suite.iter("testcase")}


def test_a_regression_is_a_failure_with_its_effect_interval_and_model(tmp_path: Path) -> None:
    """False failure: none: seeded rngs (test_markdown's report: 3% against 0.4% noise)."""
    xml = render_junit(report(tmp_path, cpu_effect=0.03, seed=1))
    found = cases(xml)
    assert set(found) == {"cpu_ns_per_request", "goodput_per_s"}
    failure = found["cpu_ns_per_request"].find("failure")
    assert failure is not None and failure.get("type") == "regression"
    message = failure.get("message", "")
    assert message.startswith("regression: cpu_ns_per_request of B against A +")
    assert "[+" in message and "model " in message and "threshold 1%" in message
    assert found["goodput_per_s"].find("failure") is None
    root = ET.fromstring(xml)
    assert root.get("tests") == "2" and root.get("failures") == "1"
    assert found["cpu_ns_per_request"].get("classname") == "hairline.checkout.B"


def test_an_inconclusive_verdict_fails_unless_the_gate_lets_it_pass(tmp_path: Path) -> None:
    """False failure: none: seeded; a 1.2% effect on 0.4% noise per value with six trials
    leaves the interval across the 1% threshold."""
    unsure = report(tmp_path, cpu_effect=0.011, seed=3)
    assert unsure.analysis is not None
    labels = {r.metric: r.verdict.label for r in unsure.analysis.results}
    assert labels["cpu_ns_per_request"] == "inconclusive", labels
    strict = cases(render_junit(unsure))["cpu_ns_per_request"]
    assert strict.find("failure") is not None
    lenient = cases(render_junit(unsure, inconclusive_passes=True))["cpu_ns_per_request"]
    skipped = lenient.find("skipped")
    assert skipped is not None and "the gate lets inconclusive pass" in skipped.get("message", "")


def test_a_regression_triaged_ignored_is_skipped(tmp_path: Path) -> None:
    xml = render_junit(
        report(tmp_path, cpu_effect=0.03, seed=1), ignored={("cpu_ns_per_request", "B")}
    )
    case = cases(xml)["cpu_ns_per_request"]
    skipped = case.find("skipped")
    assert skipped is not None and "triaged: ignored" in skipped.get("message", "")
    assert ET.fromstring(xml).get("failures") == "0"


def test_an_aa_fails_nothing_and_says_what_a_flag_means(tmp_path: Path) -> None:
    xml = render_junit(report(tmp_path, cpu_effect=0.03, seed=1, kind="aa"))
    case = cases(xml)["cpu_ns_per_request"]
    assert case.find("failure") is None
    out = case.find("system-out")
    assert out is not None and "a false positive" in (out.text or "")


def failed(tmp_path: Path, failure: str) -> ExperimentReport:
    """An experiment that ended "failed" with ``failure``, and no analysis."""
    ended = report(tmp_path, cpu_effect=0.0, seed=1)
    return dataclasses.replace(ended, phase="failed", failure=failure, analysis=None)


def test_an_experiment_that_failed_is_one_error_with_its_reason(tmp_path: Path) -> None:
    found = cases(render_junit(failed(tmp_path, "arm B did not answer /healthz within 10 s")))
    error = found["experiment"].find("error")
    assert error is not None and error.get("message", "").startswith("arm B did not answer")


def test_user_text_is_escaped_not_markup(tmp_path: Path) -> None:
    ended = failed(tmp_path, '<script>alert("x")</script> & "quotes"')
    error = cases(render_junit(ended))["experiment"].find("error")
    assert error is not None and error.get("message") == '<script>alert("x")</script> & "quotes"'


def test_a_bisection_has_a_case_per_step_and_fails_on_its_culprit() -> None:
    found = cases(render_bisection_junit(FOUND, timestamp="2026-11-28T12:00:00+00:00"))
    assert len(found) == len(FOUND.steps) + 1
    failure = found["culprit"].find("failure")
    assert failure is not None and REVISIONS[4].commit in failure.get("message", "")
    assert all(c.find("failure") is None for name, c in found.items() if name != "culprit")


@pytest.mark.parametrize(
    ("status", "outcome"),
    [("none", None), ("gradual", "failure"), ("inconclusive", "error"), ("budget", "error")],
)
def test_a_bisection_without_a_culprit_says_how_it_ended(status: str, outcome: str | None) -> None:
    ended = Bisection(
        "feed", "cpu_ns_per_request", REVISIONS, FOUND.steps[:1],
        Finished(status, None, 3, 4, "why"),  # type: ignore[arg-type]
    )  # fmt: skip
    culprit = cases(render_bisection_junit(ended, timestamp="2026-11-28T12:00:00+00:00"))["culprit"]
    kinds = [child.tag for child in culprit if child.tag in ("failure", "error")]
    assert kinds == ([outcome] if outcome else [])
