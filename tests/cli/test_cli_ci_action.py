"""`hairline ci action`, the GitHub Action's run step (action.yml), run as GitHub runs it: a
process whose only link to GitHub is the documented variables, here pointed at temporary
files (GITHUB_STEP_SUMMARY, GITHUB_OUTPUT, GITHUB_EVENT_PATH) and at the loopback fake
GitHub of tests/cli/fake_github.py (GITHUB_API_URL). Checked: the summary, the outputs,
the JUnit file, the annotation, the pull-request comment and the exit status."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from xml.etree import ElementTree

import pytest
import xmlschema
from click.testing import CliRunner
from fake_github import FakeGitHub, fake_githubs

from hairline.ci.action import OUTPUTS
from hairline.cli import main
from schema_check import check_schema
from suitekit import Commit, git

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "sample-service"
JUNIT = xmlschema.XMLSchema(ROOT / "docs" / "schema" / "junit.xsd")


@pytest.fixture
def github() -> Iterator[Callable[..., FakeGitHub]]:
    with fake_githubs() as start:
        yield start


def pull_request_event(number: int, head_repo: str, base_repo: str = "octo/svc") -> object:
    """The part of a `pull_request` event's JSON the action reads."""
    head = {"repo": {"full_name": head_repo}}
    base = {"repo": {"full_name": base_repo}, "sha": "f" * 40}
    return {"action": "synchronize", "number": number,
            "pull_request": {"number": number, "head": head, "base": base}}  # fmt: skip


def read_outputs(path: Path) -> dict[str, str]:
    """$GITHUB_OUTPUT as GitHub reads it (every value here is one line)."""
    pairs = [line.split("=", 1) for line in path.read_text().splitlines()]
    return {name: value for name, value in pairs}


def run_action(
    cwd: Path, *args: str, event: object, extra_env: Mapping[str, str] = {}
) -> tuple[subprocess.CompletedProcess[str], dict[str, Path]]:
    """`hairline ci action ARGS` in ``cwd`` with the GitHub files in ``cwd/github/``."""
    files = {name: cwd / "github" / name for name in ("summary.md", "output", "event.json")}
    files["summary.md"].parent.mkdir(exist_ok=True)
    files["event.json"].write_text(json.dumps(event))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env |= {"GITHUB_STEP_SUMMARY": str(files["summary.md"]), "GITHUB_OUTPUT": str(files["output"]),
            "GITHUB_EVENT_PATH": str(files["event.json"]), "GITHUB_REPOSITORY": "octo/svc",
            "GITHUB_EVENT_NAME": "pull_request", **extra_env}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "hairline", "ci", "action", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=240)  # fmt: skip
    return done, files


def test_a_failed_run_still_leaves_a_summary_outputs_and_its_status(
    repo: Path, commit: Commit
) -> None:
    """An experiment file that cannot run: status 2 as the verdict, a summary that says so,
    every output (the reports' empty), the base branch pointed at the base, and no comment
    for a fork's pull request (nothing is sent: the API address is a closed port)."""
    base = commit({"experiment.toml": 'service = "missing.toml"\n'})
    commit({"README": "the pull request's change\n"})
    done, files = run_action(
        repo, "experiment.toml", "--base-ref", base, "--run-args", "--wait-s 5",
        event=pull_request_event(7, head_repo="someone/svc"),
        extra_env={"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": "http://127.0.0.1:9"},
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert git(repo, "rev-parse", "hairline-base") == base
    assert "$ hairline run experiment.toml --markdown hairline-report/report.md" in done.stderr
    assert "missing.toml" in done.stdout + done.stderr  # hairline run's own error
    assert "no pull-request comment: the pull request comes from a fork (someone/svc)" in (
        done.stderr
    )
    outputs = read_outputs(files["output"])
    assert tuple(outputs) == OUTPUTS
    assert outputs["status"] == "2" and outputs["verdict"] == "error"
    assert outputs["report-dir"] == "hairline-report"
    assert outputs["markdown"] == outputs["junit"] == outputs["comment-url"] == ""
    summary = files["summary.md"].read_text()
    assert summary.startswith("## hairline: error\n")
    assert "`hairline run experiment.toml` stopped before a verdict (exit status 2)" in summary
    assert "::error title=hairline error::hairline: error (exit status 2)" in done.stdout


def test_flags_the_action_sets_itself_are_refused(tmp_path: Path) -> None:
    output = tmp_path / "output"
    result = CliRunner().invoke(
        main, ["ci", "action", "x.toml", "--run-args", "--wait-s 5 --junit=j.xml"],
        env={"GITHUB_OUTPUT": str(output), "GITHUB_EVENT_PATH": None},
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--run-args sets --junit, which the action sets itself" in result.output
    assert not output.exists()  # refused before anything ran


@pytest.mark.slow
@pytest.mark.shares_cpus
def test_a_regression_fails_the_step_with_summary_junit_outputs_and_the_comment(
    tmp_path: Path, engine_path: Path, github: Callable[..., FakeGitHub]
) -> None:
    """The sample service against itself doing twice the work of a request, through the
    action's script on a same-repository pull request whose comment the bot wrote before.

    False failure: under 1e-6: B does twice the work of a request, three trials of 1 s at
    1,000 requests/s, the setting of tests/lab/test_lab_e2e.py's regression test (+71% to
    +72% measured, the 95% interval within about +/-6% over three trials, tens of standard
    errors above the 2% threshold). It runs beside another test (shares_cpus): a neighbour
    that doubled the spread would leave the effect over five times the interval's half-width
    above the threshold."""
    for name in ("service.toml", "trace.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    (tmp_path / "experiment.toml").write_text(
        'service = "service.toml"\ntrace = "trace.jsonl"\nteam = "ci"\n'
        '[arms.A]\n[arms.B]\nargs = ["--regress-cpu", "1"]\n'
        "[load]\nrate_per_s = 1000\nduration_s = 1.0\nwarmup_duration_s = 0.3\n"
        "[design]\ntrials = 3\n"
    )
    server = github(user=None, comments=[
        ("alice", "LGTM"), ("github-actions[bot]", "<!-- hairline:perf -->\nlast push's"),
    ])  # fmt: skip
    done, files = run_action(
        tmp_path, "experiment.toml", "--key", "perf", "--run-args", "--wait-s 120",
        event=pull_request_event(7, head_repo="octo/svc"),
        extra_env={"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": server.url,
                   "HAIRLINE_ENGINE": str(engine_path)},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    outputs = read_outputs(files["output"])
    assert (outputs["status"], outputs["verdict"], outputs["experiment-id"]) == (
        "1", "regression", "1",
    )  # fmt: skip
    report = tmp_path / "hairline-report"
    assert outputs["junit"] == "hairline-report/junit.xml"
    for name in ("markdown", "json", "html", "junit"):
        assert (tmp_path / outputs[name]).is_file() and outputs[name].startswith(str(report.name))
    check_schema("experiment-report", json.loads((report / "report.json").read_text()))
    markdown = (report / "report.md").read_text()
    assert "regression" in markdown and markdown in files["summary.md"].read_text()
    JUNIT.validate(str(report / "junit.xml"))
    cases = ElementTree.parse(report / "junit.xml").iter("testcase")
    failed = [str(case.get("name")) for case in cases if case.find("failure") is not None]
    assert any("cpu_ns_per_request" in name for name in failed), failed
    # The bot's comment of last push, updated in place; alice's left alone.
    assert server.writes == [("update", 2)]
    assert server.comments[1]["body"] == "<!-- hairline:perf -->\n" + markdown
    assert server.comments[0]["body"] == "LGTM"
    assert outputs["comment-url"] == "https://github.com/octo/svc/pull/7#issuecomment-2"
    assert "::error title=hairline regression::regression found in cpu_ns_per_request" in (
        done.stdout
    )
