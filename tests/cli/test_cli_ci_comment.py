"""`hairline ci comment`: what it refuses before calling GitHub, and an API it cannot
reach (the choice of comment is tests/ci/test_ci_comment.py's; no fake GitHub here)."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

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
