"""CI integration: one pull-request comment per key, updated in place (``comment``: which
comment and what body, pure; ``github``: the REST calls)."""

from hairline.ci.comment import (
    Comment,
    CommentPlan,
    comment_body,
    has_marker,
    marker,
    next_page,
    plan_comment,
)
from hairline.ci.github import GitHub, apply_plan, list_comments

__all__ = [
    "Comment",
    "CommentPlan",
    "GitHub",
    "apply_plan",
    "comment_body",
    "has_marker",
    "list_comments",
    "marker",
    "next_page",
    "plan_comment",
]
