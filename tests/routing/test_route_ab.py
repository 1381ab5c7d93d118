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
    """False failure: about 3e-6: in a duet with one batch a trial (below), three runs of four
    trials read -32.2% [-37.3, -27.1], -34.1% [-39.9, -28.2] and -29.5% [-34.7, -24.3]
    (2026-11-29 22:28 UTC, nothing else running), per-trial spreads of 5.4, 4.4 and 3.8
    points; at the smallest effect and the largest spread the paired t on 3 degrees of
    freedom misses significance with probability 3.3e-6 (a noncentral t, scipy.stats.nct),
    8e-4 at 1.3 times that spread. Split, as the example runs (a CPU set a fleet), it reads
    -52.5% to -57%, but its trials differed by about 10 points, and four trials of two
    batches took 39 s of the suite where these take 22 s."""
    if not HAPROXY.exists():
        pytest.skip("HAProxy is not installed")
    folder = tmp_path / "routing"
    shutil.copytree(EXAMPLE, folder)
    # Four trials (the example runs three): with two, the paired t's one degree of freedom
    # left the interval of a -57% effect at [-152%, +37%] (trials differed by ~10 points).
    # Both fleets on one CPU set and the engine on the other (a duet, docs/hosts.md), one
    # batch a trial: the swap between CPU sets buys nothing when both arms share them.
    experiment = folder / "experiment.toml"
    text = experiment.read_text()
    assert "trials = 3" in text and 'name = "fully-balanced"' in text
    text = text.replace("trials = 3", "trials = 4")
    text = text.replace('name = "fully-balanced"', 'name = "request-balanced"')
    experiment.write_text(text + '\n[hosts]\nlocal_layout = "duet"\n')
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
