"""``hairline ci comment``: one pull-request comment per key, updated in place (docs/ci.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from hairline.ci.comment import check_key, check_repo, plan_comment
from hairline.ci.github import (
    ACTIONS_BOT,
    DEFAULT_API_URL,
    GitHub,
    apply_plan,
    list_comments,
    whoami,
)
from hairline.cli._base import main
from hairline.errors import ConfigError


@main.group()
def ci() -> None:
    """CI helpers: a pull request's one hairline comment."""


@ci.command()
@click.option(
    "--markdown",
    "markdown_path",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="Markdown to post ('-': stdin), as `hairline run --markdown` writes it.",
)
@click.option("--repo", required=True, metavar="OWNER/NAME", help="The repository.")
@click.option("--pr", type=click.IntRange(1), required=True, help="The pull request's number.")
@click.option(
    "--key",
    default="report",
    show_default=True,
    help="Which comment: one per key and pull request (e.g. one per service).",
)
@click.option(
    "--author",
    metavar="LOGIN",
    help="The login hairline writes as; only its comments are updated (default: the token's, "
    f"from GitHub's /user, or {ACTIONS_BOT} for a workflow's GITHUB_TOKEN).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Read the comments, print what would be done and the body; write nothing.",
)
def comment(
    markdown_path: Path, repo: str, pr: int, key: str, author: str | None, dry_run: bool
) -> None:
    """Update the pull request's comment that carries <!-- hairline:KEY -->, or create it.

    The token is $GITHUB_TOKEN (the job needs `permissions: pull-requests: write`); the
    API is $GITHUB_API_URL (default https://api.github.com).
    """
    owner, name = check_repo(repo)
    check_key(key)
    markdown = _read_markdown(markdown_path)
    token = os.environ.get("GITHUB_TOKEN", "").strip() or None
    if token is None and not dry_run:
        raise ConfigError(
            "GITHUB_TOKEN is not set: hairline cannot write the comment",
            hint="in a workflow: env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}; "
            "--dry-run shows what it would do without one",
        )
    api_url = os.environ.get("GITHUB_API_URL", "").strip() or DEFAULT_API_URL
    github = GitHub(api_url=api_url, token=token)
    if author is None:
        author = whoami(github) if token is not None else ACTIONS_BOT
    comments = list_comments(github, owner, name, pr)
    plan = plan_comment(
        comments, key=key, markdown=markdown, create_url=github.comments_url(owner, name, pr),
        author=author,
    )  # fmt: skip
    where = f"{repo}#{pr}"
    if plan.duplicates:
        others = ", ".join(str(d) for d in plan.duplicates)
        click.echo(f"note: comments {others} also carry the marker; left as they are", err=True)
    if plan.foreign:
        others = ", ".join(str(d) for d in plan.foreign)
        click.echo(f"note: comments {others} carry the marker but are not {author}'s; left "
                   "as they are", err=True)  # fmt: skip
    if dry_run:
        if plan.action == "update":
            click.echo(f"would update comment {plan.comment_id} on {where} ({plan.html_url})")
        else:
            click.echo(f"would create a comment on {where} (none of its {len(comments)} "
                       f"comments carries <!-- hairline:{key} -->)")  # fmt: skip
        click.echo(f"{plan.method} {plan.url}\n")
        click.echo(plan.body)
        return
    url = apply_plan(github, plan)
    done = f"updated comment {plan.comment_id}" if plan.action == "update" else "created a comment"
    click.echo(f"{done} on {where}: {url}")


def _read_markdown(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text()
    except OSError as err:
        raise ConfigError(
            f"--markdown {path}: {err.strerror or err}",
            hint="pass the file `hairline run --markdown FILE` wrote",
        ) from None
