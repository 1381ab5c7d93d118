"""``hairline ci comment``: one pull-request comment per key, updated in place;
``hairline ci action``: the GitHub Action's steps between install and upload (docs/ci.md)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

from hairline.ci.action import (
    OUTPUTS,
    PullRequest,
    annotation,
    append_outputs,
    comment_skip_reason,
    failure_summary,
    pull_request_of,
    read_event,
    verdict_of,
    workflow_command,
)
from hairline.ci.comment import check_key, check_repo, plan_notes
from hairline.ci.github import (
    ACTIONS_BOT,
    DEFAULT_API_URL,
    GitHub,
    apply_plan,
    comment_plan,
    whoami,
)
from hairline.cli._base import EXIT_ERROR, main
from hairline.cli._outputs import OutputFolder
from hairline.errors import ConfigError, HairlineError


@main.group()
def ci() -> None:
    """CI helpers: a pull request's one hairline comment, the GitHub Action's run."""


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
    token = _token()
    if token is None and not dry_run:
        raise ConfigError(
            "GITHUB_TOKEN is not set: hairline cannot write the comment",
            hint="in a workflow: env: GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}; "
            "--dry-run shows what it would do without one",
        )
    github = _github(token)
    if author is None:
        author = whoami(github) if token is not None else ACTIONS_BOT
    plan, count = comment_plan(github, owner, name, pr, key=key, markdown=markdown,
                               author=author)  # fmt: skip
    where = f"{repo}#{pr}"
    for note in plan_notes(plan, author):
        click.echo(note, err=True)
    if dry_run:
        if plan.action == "update":
            click.echo(f"would update comment {plan.comment_id} on {where} ({plan.html_url})")
        else:
            click.echo(f"would create a comment on {where} (none of its {count} "
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


def _token() -> str | None:
    return os.environ.get("GITHUB_TOKEN", "").strip() or None


def _github(token: str | None) -> GitHub:
    return GitHub(api_url=os.environ.get("GITHUB_API_URL", "").strip() or DEFAULT_API_URL,
                  token=token)  # fmt: skip


# The reports `ci action` asks `hairline run` for, by flag and file name in --report-dir.
_REPORTS = {"markdown": "report.md", "json": "report.json", "html": "report.html",
            "junit": "junit.xml"}  # fmt: skip


@ci.command()
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--base-ref", default="", metavar="REV",
              help="First point --base-branch at REV (the action passes the pull request's "
              "base commit); empty: leave the branch as it is.")  # fmt: skip
@click.option("--base-branch", default="hairline-base", show_default=True,
              help="The branch the experiment file's baseline arm names (git = ...).")  # fmt: skip
@click.option("--report-dir",
              type=OutputFolder("it writes four reports and the action reads them back"),
              default=Path("hairline-report"), show_default=True,
              help="Where report.md, report.json, report.html and junit.xml go.")  # fmt: skip
@click.option("--run-args", default="", metavar="ARGS",
              help="Extra `hairline run` options, split as a shell does.")  # fmt: skip
@click.option("--comment/--no-comment", "comment_on", default=True, show_default=True,
              help="Update the pull request's comment ($GITHUB_TOKEN; not for forks).")  # fmt: skip
@click.option("--key", default="report", show_default=True,
              help="Which comment: one per key and pull request.")  # fmt: skip
def action(
    experiment: Path,
    base_ref: str,
    base_branch: str,
    report_dir: Path,
    run_args: str,
    comment_on: bool,
    key: str,
) -> None:
    """Run EXPERIMENT as a GitHub Action step: `hairline run` with every report in
    --report-dir (the Markdown also in $GITHUB_STEP_SUMMARY), the step's outputs in
    $GITHUB_OUTPUT, the pull request's comment updated in place, an error annotation.

    Reads only GitHub's documented variables (GITHUB_EVENT_PATH, GITHUB_OUTPUT,
    GITHUB_STEP_SUMMARY, GITHUB_TOKEN, GITHUB_API_URL), so it runs anywhere. Exit status:
    `hairline run`'s, the verdict: 0 no regression, 1 a regression, 2 an error, 3 no hosts.
    """
    check_key(key)
    extra = shlex.split(run_args)
    taken = sorted({a.split("=")[0] for a in extra} & {f"--{flag}" for flag in _REPORTS})
    if taken:
        raise ConfigError(
            f"--run-args sets {', '.join(taken)}, which the action sets itself",
            hint="the reports are in --report-dir (report.md, report.json, report.html, "
            "junit.xml); leave those flags out",
        )
    pr = pull_request_of(read_event())
    if base_ref:
        _point_branch(base_branch, base_ref)
    report_dir.mkdir(parents=True, exist_ok=True)
    paths = {flag: report_dir / name for flag, name in _REPORTS.items()}
    for path in paths.values():  # an earlier run's would pass for this one's
        path.unlink(missing_ok=True)
    command = ["run", str(experiment), *(a for f, p in paths.items() for a in (f"--{f}", str(p)))]
    command += extra
    click.echo(f"$ hairline {shlex.join(command)}", err=True)
    sys.stdout.flush()
    status = subprocess.run([sys.executable, "-m", "hairline", *command], check=False).returncode
    status = status if status in (0, 1, 2, 3) else EXIT_ERROR
    report = _read_json(paths["json"])
    if not paths["markdown"].exists():
        # Imported here: the report package loads numpy and pyarrow (1.5 s), which
        # `ci comment` and the refusals above do not need.
        from hairline.report.markdown import append_step_summary

        append_step_summary(failure_summary(status, str(experiment)))
    outputs = {
        "status": str(status),
        "verdict": verdict_of(status),
        "experiment-id": str(report.get("experiment_id", "")),
        "report-dir": str(report_dir),
        **{flag: str(p) if p.exists() else "" for flag, p in paths.items()},
        "comment-url": _comment(pr, comment_on, key, paths["markdown"]),
    }
    append_outputs({name: outputs[name] for name in OUTPUTS})
    headline = report.get("headline") or {}
    line = annotation(status, str(headline.get("text", "")))
    if line:
        click.echo(line)
    sys.exit(status)


def _point_branch(branch: str, rev: str) -> None:
    """``git branch --force BRANCH REV`` in the working directory (the checkout)."""
    done = subprocess.run(["git", "branch", "--force", branch, rev], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise ConfigError(
            f"cannot point {branch} at {rev}: {done.stderr.strip() or 'git failed'}",
            hint="check out the whole history (actions/checkout with fetch-depth: 0), and "
            "run from the checkout",
        )
    click.echo(f"{branch} -> {rev}", err=True)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def _comment(pr: PullRequest | None, enabled: bool, key: str, markdown_path: Path) -> str:
    """Update or create the pull request's comment; its address, or "" when skipped or
    refused (a warning then: the verdict stands whatever the comment does)."""
    token = _token()
    reason = comment_skip_reason(pr, enabled=enabled, token=token is not None,
                                 markdown=markdown_path.exists())  # fmt: skip
    if reason is not None or pr is None:
        click.echo(f"no pull-request comment: {reason}", err=True)
        return ""
    github = _github(token)
    try:
        owner, name = check_repo(pr.base_repo)
        author = whoami(github)
        plan, _count = comment_plan(github, owner, name, pr.number, key=key,
                                    markdown=markdown_path.read_text(), author=author)  # fmt: skip
        for note in plan_notes(plan, author):
            click.echo(note, err=True)
        url = apply_plan(github, plan)
    except HairlineError as err:
        click.echo(workflow_command("warning", "hairline comment", str(err)))
        return ""
    done = f"updated comment {plan.comment_id}" if plan.action == "update" else "created a comment"
    click.echo(f"{done} on {pr.base_repo}#{pr.number}: {url}", err=True)
    return url
