"""The GitHub REST calls of the comment mode: list a pull request's comments (every page),
create one, update one. urllib only: three calls do not need a client library."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from hairline import __version__
from hairline.ci.comment import Comment, CommentPlan, next_page, plan_comment
from hairline.errors import HairlineError

__all__ = [
    "ACTIONS_BOT",
    "DEFAULT_API_URL",
    "GitHub",
    "GitHubError",
    "apply_plan",
    "comment_plan",
    "list_comments",
    "whoami",
]

DEFAULT_API_URL = "https://api.github.com"
# Who a workflow's GITHUB_TOKEN writes as. That token may not read /user (403), so this is
# the identity taken when GitHub will not say.
ACTIONS_BOT = "github-actions[bot]"
TIMEOUT_S = 30.0
# A pull request with more comments than this is not worth reading to the end.
MAX_PAGES = 50

_HINTS = {
    401: "set GITHUB_TOKEN to a valid token (in a workflow: env: GITHUB_TOKEN: "
    "${{ secrets.GITHUB_TOKEN }})",
    403: "the token may not write comments: give the job `permissions: pull-requests: write` "
    "(a pull request from a fork gets a read-only token)",
    404: "check --repo OWNER/NAME and --pr N, and that the token can see the repository",
    429: "GitHub's rate limit: run the job again later",
}


@dataclass(frozen=True)
class GitHub:
    """Where the API is ($GITHUB_API_URL on GitHub Enterprise) and the token (None: no
    Authorization header; only public repositories can be read then)."""

    api_url: str = DEFAULT_API_URL
    token: str | None = None

    def repo_url(self, owner: str, name: str) -> str:
        return f"{self.api_url.rstrip('/')}/repos/{quote(owner)}/{quote(name)}"

    def comments_url(self, owner: str, name: str, pr: int) -> str:
        return f"{self.repo_url(owner, name)}/issues/{pr}/comments"

    def request(
        self, method: str, url: str, payload: dict[str, Any] | None = None
    ) -> tuple[Any, str | None]:
        """The JSON answer and its Link header; a HairlineError naming the status and fix."""
        data = None if payload is None else json.dumps(payload).encode()
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"hairline/{__version__}",
        }
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
                return json.loads(resp.read() or b"null"), resp.headers.get("Link")
        except urllib.error.HTTPError as err:
            detail = _message(err)
            hint = _HINTS.get(err.code, "see the message above; --dry-run shows the plan")
            if err.code in (403, 429) and err.headers.get("x-ratelimit-remaining") == "0":
                reset = err.headers.get("x-ratelimit-reset", "")
                hint = "GitHub's rate limit is used up" + (
                    f" until {reset} (Unix time); run the job again then" if reset else ""
                )
            raise GitHubError(
                f"GitHub answered {err.code} to {method} {url}: {detail}",
                hint=hint,
                status=err.code,
            ) from None
        except (urllib.error.URLError, TimeoutError, OSError) as err:
            reason = getattr(err, "reason", err)
            raise HairlineError(
                f"cannot reach GitHub at {self.api_url}: {reason}",
                hint="check the network, or GITHUB_API_URL (default https://api.github.com)",
            ) from None


class GitHubError(HairlineError):
    """An HTTP error answer of GitHub's, with its status."""

    def __init__(self, message: str, *, hint: str, status: int) -> None:
        super().__init__(message, hint=hint)
        self.status = status


def whoami(github: GitHub) -> str:
    """The login the token writes as: ``GET /user``, or :data:`ACTIONS_BOT` when GitHub
    refuses that to the token (a workflow's GITHUB_TOKEN: 403)."""
    try:
        answer, _ = github.request("GET", f"{github.api_url.rstrip('/')}/user")
    except GitHubError as err:
        if err.status == 403:
            return ACTIONS_BOT
        raise
    login = answer.get("login") if isinstance(answer, dict) else None
    if not isinstance(login, str) or not login:
        raise HairlineError(
            "GitHub's /user answer names no login", hint="pass --author LOGIN explicitly"
        )
    return login


def _message(err: urllib.error.HTTPError) -> str:
    try:
        answer = json.loads(err.read() or b"{}")
    except (ValueError, OSError):
        return err.reason or ""
    return str(answer.get("message", err.reason)) if isinstance(answer, dict) else ""


def list_comments(github: GitHub, owner: str, name: str, pr: int) -> list[Comment]:
    """Every comment of the pull request, following the Link header's next pages."""
    url: str | None = f"{github.comments_url(owner, name, pr)}?per_page=100"
    comments: list[Comment] = []
    for _ in range(MAX_PAGES):
        if url is None:
            break
        page, link = github.request("GET", url)
        for item in page if isinstance(page, list) else []:
            user = item.get("user") or {}
            comment = Comment(
                id=int(item["id"]), body=str(item.get("body") or ""), url=str(item["url"]),
                html_url=str(item.get("html_url", "")), author=str(user.get("login", "")),
            )  # fmt: skip
            comments.append(comment)
        url = next_page(link)
    return comments


def comment_plan(
    github: GitHub, owner: str, name: str, pr: int, *, key: str, markdown: str, author: str
) -> tuple[CommentPlan, int]:
    """What to write to the pull request's comment of ``key`` (ci/comment.py's choice over
    every comment it has), and how many comments it has."""
    comments = list_comments(github, owner, name, pr)
    plan = plan_comment(comments, key=key, markdown=markdown,
                        create_url=github.comments_url(owner, name, pr), author=author)  # fmt: skip
    return plan, len(comments)


def apply_plan(github: GitHub, plan: CommentPlan) -> str:
    """Create or update the comment; its address on github.com."""
    answer, _ = github.request(plan.method, plan.url, {"body": plan.body})
    return str(answer.get("html_url", "")) if isinstance(answer, dict) else ""
