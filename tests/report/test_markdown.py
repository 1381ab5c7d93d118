"""The PR comment: headline, metrics table, escaping, and the GitHub step summary."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from report_fixture import make_report

from hairline.config import MetricPolicy, Threshold
from hairline.errors import ConfigError
from hairline.lab.analysis import AnalysisOptions, analyze
from hairline.report.context import ArmReport, ExperimentReport, HostReport
from hairline.report.markdown import append_step_summary, render_markdown
from hairline.stats.certificate import aa_record
from hairline.store.observations import read_observations, write_observations


def report(tmp_path: Path, *, cpu_effect: float, seed: int, **changes: object) -> ExperimentReport:
    """Six trials of CPU per request and goodput (lower is worse), analysed."""
    rng = np.random.default_rng(seed)
    rows: dict[str, list[object]] = {"trial": [], "arm": [], "metric": [], "value": []}
    for trial in range(6):
        for arm in ("A", "B"):
            scale = 1 + cpu_effect if arm == "B" else 1.0
            for metric, value in (
                ("cpu_ns_per_request", 150_000 * scale * (1 + rng.normal(0, 0.004))),
                ("goodput_per_s", 400 * (1 + rng.normal(0, 0.001))),
            ):
                rows["trial"].append(trial)
                rows["arm"].append(arm)
                rows["metric"].append(metric)
                rows["value"].append(value)
    observations = read_observations(write_observations(tmp_path / "o.parquet", pa.table(rows)))
    policies = {"goodput_per_s": MetricPolicy(Threshold(0.01, relative=True), "lower-is-worse")}
    options = AnalysisOptions(policies=policies, default_policy=MetricPolicy())
    setup: dict[str, object] = {
        "experiment_id": 42,
        "started_at": None,
        "finished_at": None,
        "trials": 6,
        "trials_done": 6,
        "duration_s": 6.0,
        "arms": (
            ArmReport("A", "git 1a2b3c4 (main)", "0123456789abcdef", True, None),
            ArmReport("B", "path /src/checkout", None, None, None),
        ),
        "hosts": (HostReport(0, (0,), {"cpu_model": "Xeon E-2288G", "kernel": "6.1.0"}),),
    }
    return make_report(
        **{
            "observations": observations,
            "analysis": analyze(observations, options),
            **setup,
            **changes,
        }
    )


def table_rows(markdown: str) -> list[list[str]]:
    lines = [line for line in markdown.splitlines() if line.startswith("| ")]
    return [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]


def test_a_regression_leads_the_comment_and_is_marked_in_the_table(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. The effect against
    the data's 0.4% noise per value is tens of standard errors above the 1% threshold; nothing else
    is statistical."""
    markdown = render_markdown(report(tmp_path, cpu_effect=0.03, seed=1))
    first = markdown.splitlines()[0]
    assert re.fullmatch(
        r"### hairline: regression found in cpu\\_ns\\_per\\_request \+\d\.\d\d%", first
    )
    header, cpu, goodput = table_rows(markdown)
    assert header == ["metric", "A", "B", "effect", "CI", "p", "threshold", "verdict",
                      "A/A flagged", "detects"]  # fmt: skip
    assert cpu[0] == "`cpu_ns_per_request`" and cpu[7] == "**regression**"
    # The certificate: no A/A run in this lab yet, and what the 6 trials could detect.
    assert cpu[8] == "no A/A record" and re.fullmatch(r"0\.\d+%", cpu[9])
    assert cpu[1].startswith("15") and "," in cpu[1]  # means with thousands separators
    assert cpu[6] == "1%"
    assert goodput[6] == "1% (lower worse)" and goodput[7] != "**regression**"
    # One model for both metrics, and why: no A/A history to choose by.
    assert re.search(r"\n- `[\w-]+` for both metrics: adaptive: no A/A history", markdown)


def test_each_verdict_carries_its_a_a_record_and_says_when_it_is_over_the_band(
    tmp_path: Path,
) -> None:
    """False failure: none: seeded data, and the A/A records are given."""
    records = {
        "cpu_ns_per_request": aa_record(["no change"] * 19 + ["regression"], 0.05),
        "goodput_per_s": aa_record(["regression"] * 6 + ["no change"] * 14, 0.05),
    }
    base = report(tmp_path, cpu_effect=0.03, seed=1)
    markdown = render_markdown(replace(base, aa_records=records))
    _, cpu, goodput = table_rows(markdown)
    assert cpu[8] == "1/20 (0-3 expected)"
    assert goodput[8] == "6/20 (0-3 expected): over"


def test_no_regression_and_the_setup_folded_away(tmp_path: Path) -> None:
    """False failure: none: seeded rngs make every draw the same on every run. No effect: an
    estimate reaching the 1% threshold would be about 4 standard errors of 0.4% noise over 6
    trials."""
    markdown = render_markdown(
        report(tmp_path, cpu_effect=0.0, seed=2, html_path=Path("/lab/42/report.html"))
    )
    assert "regression found" not in markdown
    assert "**regression**" not in markdown
    details = markdown[markdown.index("<details>") : markdown.index("</details>")]
    assert "fully-balanced, 6 of 6 trials, 400 requests/s for 6 s per batch" in details
    assert "build `0123456789ab` (cached)" in details
    assert "host 0: CPUs 0 (cpu\\_model Xeon E-2288G; kernel 6.1.0)" in details
    assert markdown.rstrip().endswith("HTML report: `/lab/42/report.html`")


def test_user_text_cannot_inject_html_or_break_the_table(tmp_path: Path) -> None:
    markdown = render_markdown(
        report(
            tmp_path,
            cpu_effect=0.03,
            seed=3,
            service="<script>alert(1)</script> | shop",
            arms=(ArmReport("A", "path /x/<img src=x>", None, None, None),),
        )
    )
    # Every < that is not our own <details> markup is backslash-escaped, so it stays text.
    assert not re.search(r"(?<!\\)<(?!/?(details|summary)>)", markdown)
    assert "\\<script\\>alert(1)\\</script\\> \\| shop" in markdown
    assert all(len(row) == 10 for row in table_rows(markdown))


def test_a_failed_experiment_shows_its_reason_and_no_table(tmp_path: Path) -> None:
    failure = "build of B failed: exit status 101\nerror[E0382]: use of moved value: `x`\n```"
    markdown = render_markdown(
        report(tmp_path, cpu_effect=0.0, seed=4, phase="failed", failure=failure, analysis=None)
    )
    assert markdown.startswith("### hairline: failed: build of B failed: exit status 101\n")
    assert not table_rows(markdown)
    # The whole reason, verbatim, in a fence longer than the backticks inside it.
    assert "````text\n" + failure + "\n````" in markdown


def test_the_step_summary_is_appended_when_github_sets_it(tmp_path: Path) -> None:
    summary = tmp_path / "step_summary.md"
    summary.write_text("# earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary)}
    assert append_step_summary("### first", env) == summary
    assert append_step_summary("### second\n", env) == summary
    assert summary.read_text() == "# earlier step\n### first\n### second\n"


def test_the_step_summary_is_left_alone_outside_github(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From an empty working folder: an empty variable must not become a file named "" or
    # "." here, nor anything else.
    monkeypatch.chdir(tmp_path)
    assert append_step_summary("### hairline", {}) is None
    assert append_step_summary("### hairline", {"GITHUB_STEP_SUMMARY": ""}) is None
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_step_summary_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GITHUB_STEP_SUMMARY") as err:
        append_step_summary("### hairline", {"GITHUB_STEP_SUMMARY": str(tmp_path)})
    assert err.value.hint is not None


def test_notes_about_the_measurement_are_quoted(tmp_path: Path) -> None:
    markdown = render_markdown(
        report(tmp_path, cpu_effect=0.0, seed=5, notes=("load gate late_sends failed <b>",))
    )
    assert "> load gate late\\_sends failed \\<b\\>" in markdown
