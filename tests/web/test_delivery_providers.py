"""Argo Rollouts and Flagger against a real `hairline serve` (the session's ``web_lab``) over
real experiments (``web_runs``: an A/A and the sample service's 30% CPU regression): the
documented AnalysisTemplates (examples/argo/) and Canary webhook (examples/flagger/),
requested and judged exactly as those tools do (tests/web/delivery.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from delivery import argo_measure, flagger_call
from weblab import WebLab

EXAMPLES = Path(__file__).parents[2] / "examples"
# False failure of every test here: the events that fail tests/web/test_gate_cli.py's gate
# tests, which state at most about 1e-3 through the session's web_runs
# (tests/web/conftest.py): one of the A/A's seven deciding verdicts at alpha 0.0001 flagged
# as a regression (a union bound: 7e-4), or the 30% regression (about six times its
# interval's half-width past the 2% threshold) not found.


def argo_metrics() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((EXAMPLES / "argo" / "analysis-templates.yaml").read_text())
    return {m["name"]: m for doc in docs for m in doc["spec"]["metrics"]}


@pytest.mark.slow
def test_argo_rollouts_web_provider_passes_the_aa_and_fails_the_regression(
    web_lab: WebLab, web_runs: dict[str, int]
) -> None:
    """False failure: as test_gate_cli's gate tests (above). The inconclusive case asks the
    regression's score with thresholds that make any score below 100 marginal: the
    regression's CPU fails whatever its other metrics do."""
    metrics = argo_metrics()
    args = {"hairline-url": web_lab.url, "hairline-token": web_lab.tokens["demo-read"]}

    def measured(metric: dict[str, Any], run: str) -> tuple[str, Any]:
        m = argo_measure(metric, {**args, "experiment": str(web_runs[run])})
        return m.phase, m.value

    gate = metrics["hairline-gate"]
    assert measured(gate, "aa") == ("Successful", "pass")
    assert measured(gate, "regression") == ("Failed", "fail")

    # The score template (95 and up Successful, below 75 Failed): the A/A's every metric
    # passes (the lab's policy passes its inconclusive ones, as its gate does); of the
    # regression's metrics, in the one group "all", its CPU at least fails.
    score = metrics["hairline-score"]
    phase, answer = measured(score, "aa")
    assert (phase, answer["score"]) == ("Successful", 100.0)
    phase, answer = measured(score, "regression")
    scored = answer["scorecard"]["metrics"]
    assert ("cpu_ns_per_request", "high", False) in {
        (m["metric"], m["classification"], m["passed"]) for m in scored
    }
    passing = 100 * sum(m["passed"] for m in scored) / len(scored)
    assert answer["score"] == pytest.approx(passing, abs=0.005)
    expected = "Successful" if answer["score"] >= 95 else "Inconclusive"
    assert phase == (expected if answer["score"] >= 75 else "Failed")

    web = gate["provider"]["web"]
    marginal = {**gate, "provider": {"web": {
        **web, "url": web["url"] + "&judge=score&pass_score=100&marginal_score=0"}}}  # fmt: skip
    assert measured(marginal, "regression") == ("Inconclusive", "inconclusive")


@pytest.mark.slow
def test_flagger_webhook_passes_the_aa_and_fails_the_regression(
    web_lab: WebLab, web_runs: dict[str, int]
) -> None:
    """False failure: as test_gate_cli's gate tests (above)."""
    canary = yaml.safe_load((EXAMPLES / "flagger" / "canary.yaml").read_text())
    (hook,) = canary["spec"]["analysis"]["webhooks"]
    url = web_lab.url + "/api/v1/webhooks/flagger"

    def called(run: str) -> tuple[bool, int]:
        metadata = {**hook["metadata"], "experiment": str(web_runs[run]),
                    "token": web_lab.tokens["demo-read"]}  # fmt: skip
        ok, status, _ = flagger_call({**hook, "url": url, "metadata": metadata},
                                     name="feed", namespace="prod")  # fmt: skip
        return ok, status

    assert called("aa") == (True, 200)
    assert called("regression") == (False, 412)
