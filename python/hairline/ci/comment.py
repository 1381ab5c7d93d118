"""Which pull-request comment hairline updates, and the body it writes (pure).

A comment hairline owns starts with a hidden marker, ``<!-- hairline:KEY -->``, on its
first line; GitHub renders nothing for it. One key, one comment per pull request: a
workflow that reports twice (say, one A/B per service) gives each report its own key.
The marker must open the body: a reply that quotes the comment (``> <!-- ...``) or
mentions the marker in passing is not the comment. And it must be hairline's own: only a
comment written by the identity hairline runs as is updated; another user's comment that
opens with the marker (by accident or to have a bot overwrite it) is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from hairline.errors import ConfigError

__all__ = [
    "BODY_MAX_CHARS",
    "Comment",
    "CommentPlan",
    "check_key",
    "check_repo",
    "comment_body",
    "has_marker",
    "marker",
    "next_page",
    "plan_comment",
    "plan_notes",
]

# GitHub refuses comment bodies over 65,536 characters.
BODY_MAX_CHARS = 65_536
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
_CUT_NOTE = "\n\n*(cut to GitHub's comment size; the full report is in the job's artifacts)*\n"
# One link of an RFC 8288 Link header: <url>; rel="next" (other parameters allowed).
_LINK = re.compile(r"<(?P<url>[^>]*)>(?P<params>[^,<]*)")
_REL = re.compile(r';\s*rel\s*=\s*"?(?P<rel>[^";]+)"?')


@dataclass(frozen=True)
class Comment:
    """A pull request's comment as the REST API lists it."""

    id: int
    body: str
    url: str  # its API address, for the update
    html_url: str = ""
    author: str = ""


@dataclass(frozen=True)
class CommentPlan:
    """What to do: update comment ``comment_id`` in place, or create a comment."""

    action: Literal["create", "update"]
    method: Literal["POST", "PATCH"]
    url: str
    body: str
    comment_id: int | None = None
    html_url: str = ""
    duplicates: tuple[int, ...] = ()  # other comments of ours with the marker (left alone)
    foreign: tuple[int, ...] = ()  # comments by others that carry the marker (left alone)


def check_key(key: str) -> str:
    """``key`` if it can sit in a marker (no ``-->``, no spaces), else a ConfigError."""
    if not _KEY.match(key):
        raise ConfigError(
            f"--key {key!r} cannot name a comment",
            hint="use letters, digits, '.', '_' or '-' (at most 100), e.g. --key perf",
        )
    return key


def check_repo(repo: str) -> tuple[str, str]:
    """``OWNER/NAME`` split, else a ConfigError."""
    if not _REPO.match(repo):
        raise ConfigError(
            f"--repo {repo!r} is not OWNER/NAME",
            hint="pass the repository as GitHub names it, e.g. --repo octo-org/service "
            "(in a workflow: --repo ${{ github.repository }})",
        )
    owner, name = repo.split("/")
    return owner, name


def marker(key: str) -> str:
    return f"<!-- hairline:{check_key(key)} -->"


def has_marker(body: str, key: str) -> bool:
    """Whether ``body`` is the comment of ``key``: its first line is the marker."""
    first = body.lstrip("\ufeff \t\r\n").split("\n", 1)[0].strip()
    return first == marker(key)


def comment_body(markdown: str, key: str) -> str:
    """The marker, then ``markdown``, cut to GitHub's limit with a note if it is longer."""
    head = marker(key) + "\n"
    body = head + markdown
    if len(body) <= BODY_MAX_CHARS:
        return body
    room = BODY_MAX_CHARS - len(head) - len(_CUT_NOTE)
    return head + markdown[:room] + _CUT_NOTE


def next_page(link_header: str | None) -> str | None:
    """The ``rel="next"`` address of a Link header (GitHub's pagination), if any."""
    if not link_header:
        return None
    for link in _LINK.finditer(link_header):
        rels = {r.group("rel").strip().lower() for r in _REL.finditer(link.group("params"))}
        # rel may hold several space-separated relations: rel="next last"
        if any("next" in rel.split() for rel in rels):
            return link.group("url").strip()
    return None


def plan_comment(
    comments: Sequence[Comment], *, key: str, markdown: str, create_url: str, author: str
) -> CommentPlan:
    """Update the oldest comment by ``author`` (the identity hairline runs as) that carries
    ``key``'s marker, or create one at ``create_url``. Later ones of ``author`` with the
    marker (two jobs that raced) are named in ``duplicates``, others' in ``foreign``; both
    are left alone."""
    body = comment_body(markdown, key)
    marked = sorted((c for c in comments if has_marker(c.body, key)), key=lambda c: c.id)
    ours = [c for c in marked if c.author.lower() == author.lower()]
    foreign = tuple(c.id for c in marked if c.author.lower() != author.lower())
    if not ours:
        return CommentPlan(action="create", method="POST", url=create_url, body=body,
                           foreign=foreign)  # fmt: skip
    first = ours[0]
    return CommentPlan(
        action="update", method="PATCH", url=first.url, body=body, comment_id=first.id,
        html_url=first.html_url, duplicates=tuple(c.id for c in ours[1:]), foreign=foreign,
    )  # fmt: skip


def plan_notes(plan: CommentPlan, author: str) -> list[str]:
    """What the plan leaves alone, one line each, for stderr: other comments of ours with
    the marker, and others' comments that carry it."""
    notes = []
    if plan.duplicates:
        others = ", ".join(str(d) for d in plan.duplicates)
        notes.append(f"note: comments {others} also carry the marker; left as they are")
    if plan.foreign:
        others = ", ".join(str(d) for d in plan.foreign)
        notes.append(f"note: comments {others} carry the marker but are not {author}'s; "
                     "left as they are")  # fmt: skip
    return notes
