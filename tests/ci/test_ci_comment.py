"""Which pull-request comment hairline updates and what it writes, without GitHub: the
marker, several comments (ours, others', quotes, other keys), Link-header pagination."""

from __future__ import annotations

import pytest

from hairline.ci.comment import (
    BODY_MAX_CHARS,
    Comment,
    check_repo,
    comment_body,
    has_marker,
    marker,
    next_page,
    plan_comment,
)
from hairline.errors import ConfigError

API = "https://api.github.com/repos/octo/svc"
CREATE = f"{API}/issues/7/comments"


BOT = "github-actions[bot]"


def comment(id_: int, body: str, author: str = BOT) -> Comment:
    return Comment(id=id_, body=body, url=f"{API}/issues/comments/{id_}",
                   html_url=f"https://github.com/octo/svc/pull/7#issuecomment-{id_}",
                   author=author)  # fmt: skip


def test_the_body_opens_with_the_hidden_marker() -> None:
    body = comment_body("## hairline: no regression\n", "report")
    assert body == "<!-- hairline:report -->\n## hairline: no regression\n"
    assert has_marker(body, "report")
    assert not has_marker(body, "rep")  # a key is matched whole
    assert not has_marker(body, "report-2")


def test_a_quote_or_a_mention_of_the_marker_is_not_the_comment() -> None:
    assert not has_marker("> <!-- hairline:report -->\n> ## hairline: regression", "report")
    assert not has_marker("why does <!-- hairline:report --> not show?", "report")
    assert has_marker("\r\n  <!-- hairline:report -->\r\nedited on Windows", "report")


def test_keys_that_could_break_the_marker_are_refused() -> None:
    for bad in ("a -->", "", "two words", "-x", "x" * 101):
        with pytest.raises(ConfigError, match="--key"):
            marker(bad)
    assert marker("perf.api_v2-x") == "<!-- hairline:perf.api_v2-x -->"


def test_a_long_report_is_cut_to_githubs_limit_with_a_note() -> None:
    body = comment_body("x" * 100_000, "report")
    assert len(body) == BODY_MAX_CHARS
    assert body.startswith("<!-- hairline:report -->\n") and "cut to GitHub's" in body


def test_no_comment_of_ours_means_create() -> None:
    others = [comment(1, "LGTM"), comment(2, "<!-- hairline:other -->\nanother job's")]
    plan = plan_comment(others, key="report", markdown="hi", create_url=CREATE, author=BOT)
    assert (plan.action, plan.method, plan.url) == ("create", "POST", CREATE)
    assert plan.body == "<!-- hairline:report -->\nhi"


def test_the_oldest_comment_of_ours_is_updated_and_later_ones_left_alone() -> None:
    comments = [
        comment(30, "<!-- hairline:report -->\nsecond, from a job that raced"),
        comment(10, "nice"),
        comment(20, "<!-- hairline:report -->\nfirst"),
        comment(25, "> <!-- hairline:report -->\n> quoted in a reply"),
        comment(40, "<!-- hairline:perf -->\nanother key"),
    ]
    plan = plan_comment(comments, key="report", markdown="new", create_url=CREATE, author=BOT)
    assert (plan.action, plan.method, plan.comment_id) == ("update", "PATCH", 20)
    assert plan.url == f"{API}/issues/comments/20"
    assert plan.html_url.endswith("#issuecomment-20")
    assert plan.duplicates == (30,)
    assert plan.body == "<!-- hairline:report -->\nnew"


def test_the_next_page_comes_from_the_link_header() -> None:
    link = (
        "<https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=2>; "
        'rel="next", '
        "<https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=5>; "
        'rel="last"'
    )
    assert next_page(link) == (
        "https://api.github.com/repositories/1/issues/7/comments?per_page=100&page=2"
    )
    last_page = '<https://x/c?page=1>; rel="first", <https://x/c?page=4>; rel="prev"'
    assert next_page(last_page) is None
    assert next_page(None) is None and next_page("") is None
    assert next_page('<https://x/c?page=3>; title="n"; rel="next last"') == ("https://x/c?page=3")


def test_the_repository_is_owner_slash_name() -> None:
    assert check_repo("octo-org/svc.py") == ("octo-org", "svc.py")
    for bad in ("svc", "a/b/c", "octo/", "/svc", "octo org/svc"):
        with pytest.raises(ConfigError, match="--repo"):
            check_repo(bad)


def test_a_comment_with_the_marker_by_someone_else_is_never_edited() -> None:
    """An older comment by another user that opens with the marker was chosen, so a real
    run edited someone else's comment (or failed on GitHub's 403)."""
    comments = [
        comment(5, "<!-- hairline:report -->\nmine now, says a reviewer", author="mallory"),
        comment(9, "<!-- hairline:report -->\nthe bot's", author="github-actions[bot]"),
    ]
    plan = plan_comment(comments, key="report", markdown="new", create_url=CREATE, author=BOT)
    assert (plan.action, plan.comment_id, plan.foreign) == ("update", 9, (5,))
    only_theirs = plan_comment(comments[:1], key="report", markdown="new", create_url=CREATE,
                               author="GitHub-Actions[bot]")  # fmt: skip
    assert (only_theirs.action, only_theirs.foreign) == ("create", (5,))
