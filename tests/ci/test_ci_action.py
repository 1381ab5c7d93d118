"""What the GitHub Action reads from an event and writes for GitHub, without GitHub: the pull
request and whether it is a fork's, when no comment is written, the $GITHUB_OUTPUT format,
the annotation's escaping. tests/cli/test_cli_ci_action.py runs the whole step."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.ci.action import (
    PullRequest,
    annotation,
    append_outputs,
    comment_skip_reason,
    failure_summary,
    output_text,
    pull_request_of,
    read_event,
    verdict_of,
    workflow_command,
)
from hairline.errors import ConfigError


def event(head: str | None, base: str = "octo/svc") -> dict[str, object]:
    return {"pull_request": {"number": 7, "head": {"repo": {"full_name": head} if head else None},
                             "base": {"repo": {"full_name": base}}}}  # fmt: skip


def test_a_pull_request_event_names_the_pull_request_and_whether_it_is_a_forks() -> None:
    ours = pull_request_of(event("octo/svc"))
    assert ours == PullRequest(number=7, head_repo="octo/svc", base_repo="octo/svc")
    assert not ours.from_fork
    fork, deleted_fork = pull_request_of(event("someone/svc")), pull_request_of(event(None))
    assert fork is not None and fork.from_fork
    assert deleted_fork is not None and deleted_fork.from_fork
    assert pull_request_of({"ref": "refs/heads/main", "commits": []}) is None  # a push
    assert pull_request_of({}) is None


def test_the_event_file_is_read_only_when_github_names_one(tmp_path: Path) -> None:
    assert read_event({}) == {}
    path = tmp_path / "event.json"
    path.write_text('{"pull_request": {"number": 3}}')
    assert read_event({"GITHUB_EVENT_PATH": str(path)}) == {"pull_request": {"number": 3}}
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="GITHUB_EVENT_PATH"):
        read_event({"GITHUB_EVENT_PATH": str(path)})


def test_a_comment_is_written_only_for_a_same_repository_pull_request_with_a_report() -> None:
    pr = pull_request_of(event("octo/svc"))
    fork = pull_request_of(event("someone/svc"))
    assert comment_skip_reason(pr, enabled=True, token=True, markdown=True) is None
    assert "comment input is false" in str(
        comment_skip_reason(pr, enabled=False, token=True, markdown=True)
    )
    assert "not for a pull request" in str(
        comment_skip_reason(None, enabled=True, token=True, markdown=True)
    )
    assert "fork (someone/svc)" in str(
        comment_skip_reason(fork, enabled=True, token=True, markdown=True)
    )
    assert "no token" in str(comment_skip_reason(pr, enabled=True, token=False, markdown=True))
    assert "no report" in str(comment_skip_reason(pr, enabled=True, token=True, markdown=False))


def test_outputs_are_lines_and_a_multiline_value_goes_between_delimiters() -> None:
    text = output_text({"status": "1", "notes": "a\nb"}, "EOF_x")
    assert text == "status=1\nnotes<<EOF_x\na\nb\nEOF_x\n"
    with pytest.raises(ValueError, match="delimiter"):
        output_text({"notes": "a\nEOF_x"}, "EOF_x")


def test_outputs_are_appended_to_githubs_file(tmp_path: Path) -> None:
    path = tmp_path / "output"
    path.write_text("earlier=step\n")
    assert append_outputs({"status": "0"}, {"GITHUB_OUTPUT": str(path)}) == path
    assert path.read_text() == "earlier=step\nstatus=0\n"
    assert append_outputs({"status": "0"}, {}) is None


def test_each_status_has_its_verdict_and_annotation() -> None:
    assert [verdict_of(s) for s in (0, 1, 2, 3, 9)] == [
        "no-regression", "regression", "error", "no-hosts", "error",
    ]  # fmt: skip
    assert annotation(0, "no regression") is None
    assert annotation(1, "regression found in cpu +5%") == (
        "::error title=hairline regression::regression found in cpu +5%25"  # % escaped
    )
    assert (
        annotation(3, "") == "::error title=hairline no-hosts::hairline: no-hosts (exit status 3)"
    )
    assert "exit status 3" in failure_summary(3, "perf/x.toml")
    assert failure_summary(2, "x.toml").startswith("## hairline: error\n")


def test_a_workflow_commands_text_cannot_start_another_command() -> None:
    line = workflow_command("warning", "a: b, c", "100% bad\n::error::injected")
    assert line == "::warning title=a%3A b%2C c::100%25 bad%0A::error::injected"
    assert "\n" not in line
