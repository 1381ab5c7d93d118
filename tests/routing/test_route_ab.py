"""Semantic routing against round-robin as an ordinary experiment through the lab
(examples/routing/experiment.toml): each arm is a `hairline route fleet` of four sample
services whose code cache misses burn CPU; semantic routing must lower CPU per request with
an interval that excludes 0."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hairline.lb.launch import HAPROXY
from schema_check import check_schema

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "routing"


@pytest.mark.slow
def test_semantic_routing_lowers_cpu_per_request_through_the_lab(
    tmp_path: Path, engine_path: Path
) -> None:
    """False failure: about 5e-6: the two-trial interval below, -57% [-152%, +37%], puts the
    per-trial spread near 10.5 points; with it, four trials' paired t (3 degrees of freedom)
    misses significance with probability 4.7e-6 at -57% and 3.4e-5 at docs/routing.md's
    -52.5% (three runs, 2026-11-29; a noncentral t, scipy.stats.nct). The example's three
    trials missed it with 1.3e-2 and 2.5e-2: over the budget, so the test runs a fourth."""
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed")
    folder = tmp_path / "routing"
    shutil.copytree(EXAMPLE, folder)
    # Four trials (the example runs three): with two, the paired t's one degree of freedom
    # left the interval of a -57% effect at [-152%, +37%] (trials differed by ~10 points).
    experiment = folder / "experiment.toml"
    text = experiment.read_text()
    assert "trials = 3" in text
    experiment.write_text(text.replace("trials = 3", "trials = 4"))
    out = tmp_path / "report.json"
    env = {**os.environ, "HAIRLINE_ENGINE": str(engine_path)}
    env.pop("GITHUB_STEP_SUMMARY", None)
    done = subprocess.run(
        [sys.executable, "-m", "hairline", "run", str(experiment), "--json",
         str(out), "--home", str(tmp_path / "home")],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    # An improvement is not a regression: exit status 0.
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    check_schema("experiment-report", report)
    cpu = next(m for m in report["analysis"]["metrics"] if m["metric"] == "cpu_ns_per_request")
    assert cpu["verdict"] == "improvement", {k: cpu[k] for k in ("effect_rel", "ci_rel", "model")}
    assert cpu["ci_rel"][1] < 0, cpu
    assert report["trials_done"] == 4
