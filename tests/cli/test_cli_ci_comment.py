"""`hairline ci comment`: what it refuses before calling GitHub, an API it cannot reach,
and whole runs against a loopback server that speaks GitHub's REST API (create, find by
marker over several pages, update, and GitHub's 401, 403, 404 and rate limit:
tests/cli/fake_github.py). The choice of comment alone is tests/ci/test_ci_comment.py's."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_github import FakeGitHub, fake_githubs

from hairline.cli import main


def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def comment(tmp_path: Path, *args: str, env: dict[str, str | None]) -> tuple[int, str]:
    report = tmp_path / "report.md"
    report.write_text("## hairline: no regression\n")
    result = CliRunner().invoke(main, ["ci", "comment", "--markdown", str(report), *args], env=env)
    return result.exit_code, result.output


def test_without_a_token_it_writes_nothing_and_says_how(tmp_path: Path) -> None:
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7",
                        env={"GITHUB_TOKEN": None})  # fmt: skip
    assert code == 2
    assert "GITHUB_TOKEN is not set" in out and "secrets.GITHUB_TOKEN" in out


def test_bad_flags_are_named(tmp_path: Path) -> None:
    env: dict[str, str | None] = {"GITHUB_TOKEN": "t"}
    code, out = comment(tmp_path, "--repo", "svc", "--pr", "7", env=env)
    assert code == 2 and "--repo 'svc' is not OWNER/NAME" in out
    code, out = comment(tmp_path, "--repo", "o/s", "--pr", "7", "--key", "a -->", env=env)
    assert code == 2 and "--key 'a -->' cannot name a comment" in out
    missing = CliRunner().invoke(main, ["ci", "comment", "--markdown", str(tmp_path / "no.md"),
                                        "--repo", "o/s", "--pr", "1"], env=env)  # fmt: skip
    assert missing.exit_code == 2 and "no.md" in missing.output


def test_an_unreachable_api_is_an_error_that_names_it(tmp_path: Path) -> None:
    api = f"http://127.0.0.1:{closed_port()}"
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7", "--dry-run",
                        env={"GITHUB_TOKEN": None, "GITHUB_API_URL": api})  # fmt: skip
    assert code == 2
    assert f"cannot reach GitHub at {api}" in out and "GITHUB_API_URL" in out


@pytest.fixture
def github() -> Iterator[Callable[..., FakeGitHub]]:
    with fake_githubs() as start:
        yield start


def test_the_comment_is_created_then_updated_in_place_and_nobody_elses_is_touched(
    tmp_path: Path, github: Callable[..., FakeGitHub]
) -> None:
    server = github(user="perf-bot", comments=[
        ("alice", "LGTM"), ("mallory", "<!-- hairline:report -->\nplease overwrite me"),
        ("bob", "nit"), ("carol", "> <!-- hairline:report -->\n> quoted"), ("dave", "ok"),
    ])  # fmt: skip
    env = {"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": server.url}
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7", env=env)
    assert code == 0, out
    assert "created a comment on octo/svc#7" in out and "not perf-bot's" in out
    [(first_write, created)] = server.writes
    assert first_write == "create"
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7", env=env)  # 3 pages now
    assert code == 0, out
    assert server.writes[-1] == ("update", created) and f"updated comment {created}" in out
    assert server.comments[1]["body"] == "<!-- hairline:report -->\nplease overwrite me"


def test_a_workflow_token_writes_as_the_actions_bot(
    tmp_path: Path, github: Callable[..., FakeGitHub]
) -> None:
    server = github(user=None, comments=[
        ("github-actions[bot]", "<!-- hairline:report -->\nold report"),
    ])  # fmt: skip
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7",
                        env={"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": server.url})  # fmt: skip
    assert code == 0, out
    assert server.writes == [("update", 1)]
    assert server.comments[0]["body"] == "<!-- hairline:report -->\n## hairline: no regression\n"


def test_githubs_refusals_are_errors_that_say_what_to_do(
    tmp_path: Path, github: Callable[..., FakeGitHub]
) -> None:
    server = github(user="perf-bot", comments=[])
    env: dict[str, str | None] = {"GITHUB_TOKEN": "t0ken", "GITHUB_API_URL": server.url}
    code, out = comment(tmp_path, "--repo", "octo/other", "--pr", "7", env=env)
    assert code == 2 and "GitHub answered 404" in out and "check --repo OWNER/NAME" in out
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7",
                        env={**env, "GITHUB_TOKEN": "wrong"})  # fmt: skip
    assert code == 2 and "GitHub answered 401" in out and "GITHUB_TOKEN" in out
    server.rate_limited = True
    code, out = comment(tmp_path, "--repo", "octo/svc", "--pr", "7", env=env)
    assert code == 2 and "rate limit is used up until 1800000000" in out
    assert server.writes == []
