"""``print_experiment``: the header panel, progress while running, then the verdict table."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from report_fixture import make_report
from rich.console import Console

from hairline.lab.analysis import AnalysisOptions, analyze
from hairline.report.context import ArmReport, ExperimentReport, HostReport
from hairline.report.terminal import print_experiment
from hairline.store.observations import read_observations, write_observations


def report(tmp_path: Path, **changes: object) -> ExperimentReport:
    """Five trials of CPU per request in which B costs 4% more, analysed."""
    rng = np.random.default_rng(11)
    trials = [t for t in range(5) for _ in ("A", "B")]
    arms = ["A", "B"] * 5
    cpu = [1000 * (1.04 if arm == "B" else 1.0) * (1 + rng.normal(0, 0.004)) for arm in arms]
    table = pa.table(
        {"trial": trials, "arm": arms, "metric": ["cpu_ns_per_request"] * 10, "value": cpu}
    )
    observations = read_observations(write_observations(tmp_path / "o.parquet", table))
    setup: dict[str, object] = {
        "experiment_id": 9,
        "finished_at": datetime(2025, 3, 1, 12, 5, 30, tzinfo=UTC),
        "trials": 5,
        "trials_done": 5,
        "duration_s": 6.0,
        "arms": (
            ArmReport("A", "git 1a2b3c4 (main)", "0123456789abcdef", True, None),
            ArmReport("B", "path /src/checkout", "fedcba9876543210", False, None),
        ),
        "hosts": (HostReport(0, (0, 1), {"cpu_model": "Xeon", "turbo": "off"}),),
        "html_path": Path("/lab/9/report.html"),
    }
    analysis = analyze(observations, AnalysisOptions())
    return make_report(**{"observations": observations, "analysis": analysis, **setup, **changes})


def shown(experiment: ExperimentReport) -> str:
    console = Console(record=True, width=140, color_system=None)
    print_experiment(experiment, console)
    # Column widths follow the longest label; compare text with runs of spaces squeezed.
    return re.sub(r" +", " ", console.export_text())


def test_a_finished_experiment_shows_its_setup_and_verdicts(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The effect against
    the data's 0.4% noise per value is tens of standard errors above the 1% threshold; nothing else
    is statistical."""
    text = shown(report(tmp_path))
    assert "hairline: checkout #9" in text
    assert "regression found in cpu_ns_per_request +" in text
    assert "9 (A/B) of checkout" in text
    assert "took 270 s" in text
    assert "arm A git 1a2b3c4 (main) (build 0123456789ab, cached)" in text
    assert "arm B path /src/checkout (build fedcba987654, built)" in text
    assert "host 0 CPUs 0,1; cpu_model Xeon, turbo off" in text
    assert "HTML report /lab/9/report.html" in text
    # The verdict table of print_analysis follows the panel.
    assert text.index("hairline: checkout #9") < text.index("each arm against A")
    assert re.search(r"│ cpu_ns_per_request │ B │ \+3\.\d\d% │ .* │ regression │", text)


def test_a_running_experiment_shows_its_progress(tmp_path: Path) -> None:
    text = shown(report(tmp_path, phase="running", trials_done=2, analysis=None, finished_at=None))
    assert "running: 2 of 5 trials done" in text
    assert "2/5 trials" in text
    assert "━" in text  # the progress bar
    assert "each arm against" not in text  # no verdicts yet


def test_a_failure_is_shown_verbatim(tmp_path: Path) -> None:
    failure = "build of B failed: [bold]not markup[/bold] <stderr>\nsecond line"
    text = shown(report(tmp_path, phase="failed", failure=failure, analysis=None))
    assert "failed: build of B failed: [bold]not markup[/bold] <stderr>" in text
    assert "second line" in text


def test_notes_about_the_measurement_are_in_the_panel(tmp_path: Path) -> None:
    text = shown(report(tmp_path, notes=("load gate late_sends failed in 3 of 10 batches",)))
    assert "note load gate late_sends failed in 3 of 10 batches" in text


def test_arms_that_differ_only_in_args_or_env_are_told_apart(tmp_path: Path) -> None:
    arms = (
        ArmReport("A", "the service's start command", None, None, None),
        ArmReport(
            "B", "the service's start command", None, None, None,
            args=("--regress-cpu", "0.05"), env=(("GZIP_LEVEL", "9"),),
        ),
    )  # fmt: skip
    text = shown(report(tmp_path, arms=arms))
    assert "arm B the service's start command; args --regress-cpu 0.05; env GZIP_LEVEL=9" in text
    [line_a] = [line for line in text.splitlines() if "arm A" in line]
    assert "args" not in line_a and "env" not in line_a


def test_an_absolute_threshold_shows_the_effect_in_the_metrics_unit(tmp_path: Path) -> None:
    from hairline.config import MetricPolicy, Threshold

    rows = {"trial": [t for t in range(5) for _ in "AB"], "arm": ["A", "B"] * 5}
    rng = np.random.default_rng(3)
    errors = [v for _ in range(5) for v in (0.0005 * rng.random(), 0.002 + 0.0005 * rng.random())]
    table = pa.table({**rows, "metric": ["error_rate"] * 10, "value": errors})
    observations = read_observations(write_observations(tmp_path / "e.parquet", table))
    policy = {"error_rate": MetricPolicy(Threshold(0.001, relative=False))}
    analysis = analyze(observations, AnalysisOptions(policies=policy))
    text = shown(report(tmp_path, analysis=analysis, observations=observations))
    row = next(line for line in text.splitlines() if line.startswith("│ error_rate"))
    assert re.search(r"│ \+0\.0\d+ │", row) and "%" not in row and "│ 0.001 │" in row, row
