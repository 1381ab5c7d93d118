"""Endpoint labels: REGEX=NAME rules with captures, and id normalisation."""

from __future__ import annotations

import pytest

from hairline.errors import ConfigError
from hairline.trace.labels import Labeller, normalize_ids, parse_label_rule, parse_label_rules


def label(path: str, *rules: str, ids: bool = False) -> str:
    return Labeller(parse_label_rules(rules), normalize_ids=ids)(path)


def test_the_first_matching_rule_wins_and_the_query_is_ignored() -> None:
    rules = ("^/api/users/[0-9]+$=/users/:id", "^/api/=api", "users=never")
    assert label("/api/users/123?fields=name", *rules) == "/users/:id"
    assert label("/api/users/123/posts", *rules) == "api"
    assert label("/static/users.css", *rules) == "never"
    # The regex sees the path only, so a query cannot make a rule match.
    assert label("/home?next=/api/x", *rules) == "/home"


def test_names_expand_numbered_and_named_captures() -> None:
    assert label("/api/v2/users/7", r"^/api/(v[0-9]+)/(\w+)/=$2-$1") == "users-v2"
    assert label("/api/orders/9", r"^/api/(?P<kind>[a-z]+)/=${kind}s") == "orderss"
    assert label("/api/orders/9", r"^/api/(?P<kind>[a-z]+)/=api-$kind") == "api-orders"
    assert label("/shop/12", r"^/shop/([0-9])=${1}x") == "1x"
    assert label("/price", r"^/price$=cost in $$") == "cost in $"
    assert label("/abc", r"^/(a)(z)?=[$2]") == "[]"  # a group that took no part: empty


def test_the_rule_splits_on_the_last_equals_sign() -> None:
    rule = parse_label_rule(r"^/find/q=[a-z]+$=search")
    assert rule.pattern.pattern == r"^/find/q=[a-z]+$"
    assert label("/find/q=books", r"^/find/q=[a-z]+$=search") == "search"
    assert label("/find/q=42", r"^/find/q=[a-z]+$=search") == "/find/q=42"


def test_a_name_that_expands_to_nothing_falls_back_to_the_default() -> None:
    rules = (r"^/static/(.*)$=$1", "^/=everything-else")
    assert label("/static/app.js", *rules) == "app.js"
    # The first matching rule decides, even when its name is empty: no fall-through.
    assert label("/static/", *rules) == "/static/"
    assert label("/static/7", *rules, ids=True) == "7"


def test_unmatched_paths_keep_their_path_or_get_ids_normalised() -> None:
    assert label("/users/123/posts/9?x=1") == "/users/123/posts/9"
    assert label("/users/123/posts/9?x=1", ids=True) == "/users/:id/posts/:id"


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/users/123/posts/9", "/users/:id/posts/:id"),
        ("/orders/3f2504e0-4f89-11d3-9a0c-0305e82c3301", "/orders/:id"),
        ("/orders/3F2504E0-4F89-11D3-9A0C-0305E82C3301/items", "/orders/:id/items"),
        ("/blobs/9f86d081884c7d659a2feaa0c55ad015", "/blobs/:id"),
        ("/objects/507f1f77bcf86cd799439011", "/objects/:id"),
        ("/v2/cafe/beef/deadbeef", "/v2/cafe/beef/deadbeef"),  # short hex is a word
        ("/static/app.9f86d081884c7d65.js", "/static/app.9f86d081884c7d65.js"),
        ("/items/12a", "/items/12a"),
        ("/", "/"),
        ("/a//1/", "/a//:id/"),
        ("/\u0661\u0662", "/\u0661\u0662"),  # Arabic-Indic digits are not ASCII ids
    ],
)
def test_id_like_segments(path: str, expected: str) -> None:
    assert normalize_ids(path) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("no-equals-sign", "expected REGEX=NAME"),
        ("=name", "regex is empty"),
        ("^/a=", "NAME after the last '=' is empty"),
        ("^/a(=x", "does not compile"),
        ("^/(a)=$2", "refers to a group the regex does not have"),
        ("^/(a)=$1a", "for group 1 then text, write ${1}"),
        ("^/(?P<kind>a)=$knd", "its groups: kind"),
        ("^/a=cost $", "write $$"),
        ("^/a=${oops", "write $$"),
        ("^/a=${1x}", "names no group"),
    ],
)
def test_bad_rules_say_what_to_write(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_label_rule(text)
    assert problem in info.value.message
    assert info.value.hint and "REGEX=NAME" in info.value.hint


def test_every_bad_rule_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        parse_label_rules(["^/ok=ok", "bad", "^/(x)=$3"])
    assert "'bad'" in info.value.message and "'^/(x)=$3'" in info.value.message
