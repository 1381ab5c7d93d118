"""`hairline ci comment`: what it refuses before calling GitHub, an API it cannot reach,
and whole runs against a loopback server that speaks GitHub's REST API (create, find by
marker over several pages, update, and GitHub's 401, 403, 404 and rate limit). The choice
of comment alone is tests/ci/test_ci_comment.py's."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
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


class FakeGitHub(ThreadingHTTPServer):
    """A loopback server speaking the part of GitHub's REST API the comment mode uses:
    /user, a pull request's comments (two a page, with Link headers), create and update
    (403 for another user's comment, as GitHub answers). ``user`` None answers /user with
    403, as GitHub does to a workflow's GITHUB_TOKEN, which then writes as the Actions bot.
    ``rate_limited`` answers everything with 403 and X-RateLimit-Remaining: 0."""

    def __init__(self, *, user: str | None, comments: list[dict[str, Any]]) -> None:
        super().__init__(("127.0.0.1", 0), _GitHubHandler)
        self.user, self.comments, self.rate_limited = user, comments, False
        self.writes: list[tuple[str, int]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def writer(self) -> str:
        return self.user or "github-actions[bot]"


class _GitHubHandler(BaseHTTPRequestHandler):
    server: FakeGitHub

    def log_message(self, *_args: object) -> None:  # quiet
        pass

    def _send(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _refused(self) -> bool:
        if self.headers.get("Authorization") != "Bearer t0ken":
            self._send(401, {"message": "Bad credentials"})
            return True
        if self.server.rate_limited:
            self._send(
                403,
                {"message": "API rate limit exceeded"},
                {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000000"},
            )
            return True
        return False

    def do_GET(self) -> None:
        if self._refused():
            return
        path, _, query = self.path.partition("?")
        if path == "/user":
            if self.server.user is None:
                self._send(403, {"message": "Resource not accessible by integration"})
            else:
                self._send(200, {"login": self.server.user})
            return
        if path != "/repos/octo/svc/issues/7/comments":
            self._send(404, {"message": "Not Found"})
            return
        page = int(dict(p.split("=") for p in query.split("&") if "=" in p).get("page", "1"))
        items = self.server.comments[(page - 1) * 2 : page * 2]
        more = page * 2 < len(self.server.comments)
        link = f'<{self.server.url}{path}?per_page=100&page={page + 1}>; rel="next"'
        self._send(200, items, {"Link": link} if more else None)

    def _body(self) -> str:
        return str(json.loads(self.rfile.read(int(self.headers["Content-Length"])))["body"])

    def do_POST(self) -> None:
        if self._refused():
            return
        new_id = 100 + len(self.server.comments)
        self.server.comments.append(
            _comment(new_id, self._body(), self.server.writer, self.server.url)
        )
        self.server.writes.append(("create", new_id))
        self._send(201, self.server.comments[-1])

    def do_PATCH(self) -> None:
        if self._refused():
            return
        comment_id = int(self.path.rsplit("/", 1)[-1])
        found = next(c for c in self.server.comments if c["id"] == comment_id)
        if found["user"]["login"] != self.server.writer:
            self._send(403, {"message": "You cannot edit another user's comment"})
            return
        found["body"] = self._body()
        self.server.writes.append(("update", comment_id))
        self._send(200, found)


def _comment(id_: int, body: str, login: str, api: str) -> dict[str, Any]:
    return {"id": id_, "body": body, "user": {"login": login},
            "url": f"{api}/repos/octo/svc/issues/comments/{id_}",
            "html_url": f"https://github.com/octo/svc/pull/7#issuecomment-{id_}"}  # fmt: skip


@pytest.fixture
def github() -> Iterator[Callable[..., FakeGitHub]]:
    servers: list[FakeGitHub] = []

    def start(*, user: str | None, comments: list[tuple[str, str]]) -> FakeGitHub:
        server = FakeGitHub(user=user, comments=[])
        server.comments = [
            _comment(i + 1, b, who, server.url) for i, (who, b) in enumerate(comments)
        ]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


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
