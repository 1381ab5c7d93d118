"""An experiment as JUnit XML: what CI systems (GitLab, Jenkins, Azure DevOps, GitHub's
test-report actions) show as test results.

One test suite per experiment and one test case per metric verdict of each candidate arm
(class ``hairline.SERVICE.CANDIDATE``, name the metric). The outcome follows the release
gate (web/queries.py ``gate_of``): a deciding regression is a ``<failure>`` (``<skipped>`` once
triaged "ignored"); a deciding
inconclusive verdict is a ``<failure>`` too unless the service's gate policy lets it pass,
then it is ``<skipped>`` saying so; everything else passes. An A/A run fails nothing (its
exit status is 0): a flagged metric is a false positive at the rate of alpha, said in the
case's output. An experiment that did not finish is one ``<error>`` case with the reason.
Every case's message has the effect, its interval, the model, p and the threshold.

A bisection is one suite too: a case per step (it passes: a step that finds a regression
is the search working), and a ``culprit`` case that fails naming the first bad commit when
one was found (or the change came in gradually), passes when there was none, or errors
when the bisection ended undecided.
``docs/schema/junit.xsd`` is the format as written here; a test validates against it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Collection

from hairline.lab.analysis import MetricAnalysis
from hairline.lab.bisect import Bisection
from hairline.report.bisect import step_effect, step_interval
from hairline.report.context import ExperimentReport, effect_text, threshold_text

__all__ = ["render_bisection_junit", "render_junit"]


def _message(result: MetricAnalysis) -> str:
    effect, interval = effect_text(result)
    verdict = result.verdict
    return (
        f"{verdict.label}: {result.metric} of {result.candidate} against {result.baseline} "
        f"{effect} {interval}, threshold {threshold_text(result)}, model {result.model}, "
        f"p {verdict.p_adjusted:.3g}"
    )


def _case(
    suite: ET.Element,
    report: ExperimentReport,
    result: MetricAnalysis,
    *,
    inconclusive_passes: bool,
    ignored: Collection[tuple[str, str]],
) -> str:
    """Append ``result``'s test case; its outcome: "failure", "skipped" or "passed"."""
    case = ET.SubElement(
        suite,
        "testcase",
        classname=f"hairline.{report.service}.{result.candidate}",
        name=result.metric,
        time="0",
    )
    message, label = _message(result), result.verdict.label
    deciding = report.analysis is not None and report.analysis.decides(result.candidate)
    outcome = "passed"
    if report.kind == "ab" and deciding and label == "regression":
        outcome = "skipped" if (result.metric, result.candidate) in ignored else "failure"
    elif report.kind == "ab" and deciding and label == "inconclusive":
        outcome = "skipped" if inconclusive_passes else "failure"
    if outcome == "failure":
        node = ET.SubElement(case, "failure", message=message, type=label)
        node.text = result.verdict.reason
    elif outcome == "skipped":
        why = "triaged: ignored" if label == "regression" else "the gate lets inconclusive pass"
        ET.SubElement(case, "skipped", message=f"{message} ({why})")
    out = ET.SubElement(case, "system-out")
    note = ""
    if report.kind == "aa" and label == "regression":
        note = " (an A/A: a false positive, expected at the rate of alpha)"
    elif not deciding:
        note = " (context: this comparison does not decide the outcome)"
    out.text = f"{message}; {result.verdict.reason}{note}"
    return outcome


def render_junit(
    report: ExperimentReport,
    *,
    inconclusive_passes: bool = False,
    ignored: Collection[tuple[str, str]] = (),
) -> str:
    """The JUnit XML document of ``report``; ``inconclusive_passes``: the service's gate
    policy ("pass" lets an inconclusive deciding verdict through); ``ignored``: the
    (metric, candidate) regressions triaged "ignored", which the gate lets pass (skipped)."""
    root = ET.Element("testsuites", name="hairline")
    suite = ET.SubElement(
        root,
        "testsuite",
        name=f"hairline {report.kind.upper()} #{report.experiment_id} of {report.service}",
        timestamp=(report.started_at or report.created_at).replace(microsecond=0).isoformat(),
    )
    properties = ET.SubElement(suite, "properties")
    for name, value in (
        ("experiment_id", report.experiment_id),
        ("kind", report.kind),
        ("mode", report.mode),
        ("design", report.design),
        ("trials", report.trials_done),
        ("phase", report.phase),
        ("html_report", report.html_path or ""),
    ):
        ET.SubElement(properties, "property", name=name, value=str(value))
    counts = {"failure": 0, "skipped": 0, "passed": 0, "error": 0}
    if report.phase != "done" or report.analysis is None:
        case = ET.SubElement(
            suite, "testcase", classname=f"hairline.{report.service}", name="experiment", time="0"
        )
        reason = report.failure or f"the experiment is {report.phase}, with no verdict"
        ET.SubElement(case, "error", message=reason, type=report.phase)
        counts["error"] = 1
    else:
        for result in report.analysis.results:
            outcome = _case(
                suite, report, result, inconclusive_passes=inconclusive_passes, ignored=ignored
            )
            counts[outcome] += 1
    elapsed_s = 0.0
    if report.started_at is not None and report.finished_at is not None:
        elapsed_s = max((report.finished_at - report.started_at).total_seconds(), 0.0)
    return _document(root, suite, counts, elapsed_s)


def _document(root: ET.Element, suite: ET.Element, counts: dict[str, int], elapsed_s: float) -> str:
    """The counts on both levels, then the document as text."""
    for element in (root, suite):
        element.set("tests", str(sum(counts.values())))
        element.set("failures", str(counts["failure"]))
        element.set("errors", str(counts["error"]))
        element.set("skipped", str(counts["skipped"]))
        element.set("time", f"{elapsed_s:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def render_bisection_junit(result: Bisection, *, timestamp: str) -> str:
    """The JUnit XML of a bisection (``timestamp``: when it started, ISO 8601)."""
    root = ET.Element("testsuites", name="hairline")
    suite = ET.SubElement(
        root, "testsuite", name=f"hairline bisect of {result.service} on {result.metric}",
        timestamp=timestamp,
    )  # fmt: skip
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="status", value=result.finished.status)
    counts = {"failure": 0, "skipped": 0, "passed": 0, "error": 0}
    for number, step in enumerate(result.steps, start=1):
        case = ET.SubElement(
            suite, "testcase", classname=f"hairline.{result.service}.bisect",
            name=f"step {number} ({step.step.purpose}): {step.candidate.commit[:12]} against "
            f"{step.baseline.commit[:12]}",
            time="0",
        )  # fmt: skip
        out = ET.SubElement(case, "system-out")
        out.text = (
            f"experiment {step.experiment_id}: {step.outcome}, {result.metric} "
            f"{step_effect(step) or 'n/a'} {step_interval(step)}, threshold "
            f"{step.threshold_text}, p {step.p_value if step.p_value is not None else 'n/a'}"
        )
        counts["passed"] += 1
    case = ET.SubElement(
        suite, "testcase", classname=f"hairline.{result.service}.bisect", name="culprit", time="0"
    )
    culprit = result.culprit
    if culprit is not None:
        message = f"first bad commit {culprit.commit}: {culprit.subject}"
        node = ET.SubElement(case, "failure", message=message, type="regression")
        node.text = result.finished.reason
        counts["failure"] += 1
    elif result.finished.status == "gradual":
        message = "no single culprit: the change came in over several commits"
        node = ET.SubElement(case, "failure", message=message, type="gradual")
        node.text = result.finished.reason
        counts["failure"] += 1
    elif result.finished.status == "none":
        counts["passed"] += 1
        ET.SubElement(case, "system-out").text = result.finished.reason
    else:
        ET.SubElement(case, "error", message=result.finished.reason, type=result.finished.status)
        counts["error"] += 1
    return _document(root, suite, counts, 0.0)
