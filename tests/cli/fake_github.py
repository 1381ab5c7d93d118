"""A loopback server that speaks the part of GitHub's REST API hairline's comment mode uses,
for `hairline ci comment` (tests/cli/test_cli_ci_comment.py) and `hairline ci action`
(tests/cli/test_cli_ci_action.py). Each test module's ``github`` fixture is::

    @pytest.fixture
    def github() -> Iterator[Callable[..., FakeGitHub]]:
        with fake_githubs() as start:
            yield start

and a test starts one with ``github(user=..., comments=[(login, body), ...])``."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeGitHub", "api_comment", "fake_githubs"]


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
            api_comment(new_id, self._body(), self.server.writer, self.server.url)
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


def api_comment(id_: int, body: str, login: str, api: str) -> dict[str, Any]:
    return {"id": id_, "body": body, "user": {"login": login},
            "url": f"{api}/repos/octo/svc/issues/comments/{id_}",
            "html_url": f"https://github.com/octo/svc/pull/7#issuecomment-{id_}"}  # fmt: skip


@contextlib.contextmanager
def fake_githubs() -> Iterator[Callable[..., FakeGitHub]]:
    """Start fake GitHubs on demand, each with its comments (login, body); all stopped at
    the end."""
    servers: list[FakeGitHub] = []

    def start(*, user: str | None, comments: list[tuple[str, str]]) -> FakeGitHub:
        server = FakeGitHub(user=user, comments=[])
        server.comments = [
            api_comment(i + 1, b, who, server.url) for i, (who, b) in enumerate(comments)
        ]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
