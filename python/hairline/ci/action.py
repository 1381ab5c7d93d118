"""What the GitHub Action (``action.yml``, ``hairline ci action``) reads from and writes to a
GitHub Actions job, through the variables GitHub documents and nothing else:

- ``GITHUB_EVENT_PATH``: the event's JSON; a pull request's number, and whether its head
  is a fork (whose token cannot write comments);
- ``GITHUB_OUTPUT``: the step's outputs, ``name=value`` lines (a value with a newline in
  the ``name<<DELIMITER`` form);
- ``GITHUB_STEP_SUMMARY``: the report, appended by ``hairline run --markdown``; here only
  the line for a run that ended without one;
- workflow commands on stdout (``::error title=...::message``) for the annotations.

Everything but the two appends is pure, so a test can point the variables at files.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hairline.errors import ConfigError

__all__ = [
    "OUTPUTS",
    "VERDICTS",
    "PullRequest",
    "annotation",
    "append_outputs",
    "comment_skip_reason",
    "failure_summary",
    "output_text",
    "pull_request_of",
    "read_event",
    "verdict_of",
    "workflow_command",
]

# The step's outputs, each one of action.yml's (tests/test_action_yml.py holds the two equal).
OUTPUTS = ("status", "verdict", "experiment-id", "report-dir", "markdown", "json", "html",
           "junit", "comment-url")  # fmt: skip
# `hairline run`'s exit status, as the action's `verdict` output names it.
VERDICTS = {0: "no-regression", 1: "regression", 2: "error", 3: "no-hosts"}


@dataclass(frozen=True)
class PullRequest:
    """The pull request an event is about: its number, and the repositories of its head
    and base (``owner/name``); a head elsewhere is a fork's."""

    number: int
    head_repo: str
    base_repo: str

    @property
    def from_fork(self) -> bool:
        return self.head_repo.lower() != self.base_repo.lower()


def read_event(env: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The event's JSON (``$GITHUB_EVENT_PATH``), or ``{}`` when the variable is unset (a
    run outside GitHub Actions)."""
    target = env.get("GITHUB_EVENT_PATH", "").strip()
    if not target:
        return {}
    try:
        event = json.loads(Path(target).read_text())
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"GITHUB_EVENT_PATH={target}: cannot read the event: {err}",
            hint="GitHub Actions sets it to the event's JSON; unset it outside a workflow",
        ) from None
    return event if isinstance(event, dict) else {}


def pull_request_of(event: Mapping[str, Any]) -> PullRequest | None:
    """The pull request of a ``pull_request`` (or ``pull_request_target``) event; None
    for any other event (a push, a schedule, a manual run)."""
    pr = event.get("pull_request")
    if not isinstance(pr, dict) or not isinstance(pr.get("number"), int):
        return None
    head = ((pr.get("head") or {}).get("repo") or {}).get("full_name")
    base = ((pr.get("base") or {}).get("repo") or {}).get("full_name")
    # A fork that was deleted leaves the head repository null: treat it as a fork.
    return PullRequest(number=pr["number"], head_repo=str(head or ""), base_repo=str(base or ""))


def comment_skip_reason(
    pr: PullRequest | None, *, enabled: bool, token: bool, markdown: bool
) -> str | None:
    """Why the action writes no comment, or None when it writes one."""
    if not enabled:
        return "the comment input is false"
    if pr is None:
        return "this run is not for a pull request"
    if pr.from_fork:
        return (
            f"the pull request comes from a fork ({pr.head_repo or 'deleted'}), whose token "
            "cannot write comments; the step summary has the report"
        )
    if not token:
        return "no token (the github-token input is empty)"
    if not markdown:
        return "the run wrote no report"
    return None


def verdict_of(status: int) -> str:
    return VERDICTS.get(status, "error")


def failure_summary(status: int, experiment: str) -> str:
    """The step summary's lines for a run that ended without a report (it writes its own
    otherwise): what happened and where to look."""
    what = {
        3: "gave up waiting for hosts; the experiment stays queued",
    }.get(status, "stopped before a verdict")
    return (
        f"## hairline: {verdict_of(status)}\n\n"
        f"`hairline run {experiment}` {what} (exit status {status}); the job's log says why.\n"
    )


def workflow_command(level: str, title: str, message: str) -> str:
    """A workflow command line (``::error title=T::message``) that shows in the checks
    view; the message and title escaped as GitHub's toolkit escapes them."""

    def data(text: str) -> str:
        return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")

    title = data(title).replace(":", "%3A").replace(",", "%2C")
    return f"::{level} title={title}::{data(message)}"


def annotation(status: int, headline: str) -> str | None:
    """The error that marks a run with anything but no regression, or None."""
    if status == 0:
        return None
    text = headline or f"hairline: {verdict_of(status)} (exit status {status})"
    return workflow_command("error", f"hairline {verdict_of(status)}", text)


def output_text(outputs: Mapping[str, str], delimiter: str) -> str:
    """``$GITHUB_OUTPUT`` lines: ``name=value``, or a value with a newline between
    ``name<<DELIMITER`` and ``DELIMITER`` lines (``delimiter`` must occur in no value)."""
    lines = []
    for name, value in outputs.items():
        if "\n" in value or "\r" in value:
            if delimiter in value:
                raise ValueError(f"the delimiter {delimiter!r} occurs in output {name}")
            lines += [f"{name}<<{delimiter}", value, delimiter]
        else:
            lines.append(f"{name}={value}")
    return "".join(line + "\n" for line in lines)


def append_outputs(outputs: Mapping[str, str], env: Mapping[str, str] = os.environ) -> Path | None:
    """Append the outputs to ``$GITHUB_OUTPUT`` when it is set; the path or None."""
    target = env.get("GITHUB_OUTPUT", "").strip()
    if not target:
        return None
    text = output_text(outputs, f"ghadelimiter_{secrets.token_hex(16)}")
    try:
        with Path(target).open("a", encoding="utf-8") as f:
            f.write(text)
    except OSError as err:
        raise ConfigError(
            f"GITHUB_OUTPUT={target}: cannot write the outputs: {err.strerror or err}",
            hint="point GITHUB_OUTPUT at a writable file, or unset it",
        ) from None
    return Path(target)
