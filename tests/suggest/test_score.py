"""Impact scores against hand-computed values; thresholds and the machine-hour budget."""

from __future__ import annotations

import pytest

from hairline.errors import ConfigError
from hairline.profile.formats import Frame, parse_folded
from hairline.suggest.changes import ChangedFunction
from hairline.suggest.score import (
    decide,
    frame_matches,
    impact,
    parse_score_threshold,
    within_budget,
)

PROFILE = parse_folded(
    """\
GET /search;app.web.handle;app.search.lookup;app.search.tokenize 40
GET /search;app.web.handle;app.search.lookup 20
GET /search;app.web.handle;app.render.page 25
POST /item;app.web.handle;app.store.save;app.search.tokenize 10
POST /item;app.web.handle;app.store.save 5
GET /home;app.web.handle;app.render.page;app.render.page 100
"""
)  # total 200


def fn(name: str, local: str, change: str = "modified") -> ChangedFunction:
    path = name.rsplit(".", 1)[0].replace(".", "/") + ".py"
    return ChangedFunction(name, path, change, 1, local)  # type: ignore[arg-type]


def test_the_diff_counts_a_stack_holding_two_modified_functions_once() -> None:
    lookup, tokenize = fn("app.search.lookup", "lookup"), fn("app.search.tokenize", "tokenize")
    diff = impact(PROFILE, [lookup, tokenize])
    by = {f.function.name: f for f in diff.functions}
    # lookup: 40 + 20; tokenize: 40 + 10, 40 of it under lookup; self: tokenize is the leaf
    assert (by["app.search.lookup"].cost, by["app.search.lookup"].self_cost) == (60, 20)
    assert (by["app.search.tokenize"].cost, by["app.search.tokenize"].self_cost) == (50, 50)
    assert by["app.search.tokenize"].endpoints == {"GET /search": 40, "POST /item": 10}
    # the diff: 40 + 20 + 10 (not 60 + 50)
    assert diff.cost == 70 and diff.total == 200 and diff.share == pytest.approx(0.35)
    assert [(e.endpoint, e.cost, round(e.share, 4)) for e in diff.endpoints] == [
        ("GET /search", 60, 0.8571), ("POST /item", 10, 0.1429)
    ]  # fmt: skip
    assert diff.endpoints[0].fraction == pytest.approx(60 / 85)


def test_recursion_counts_once_and_a_pure_rename_scores_nothing() -> None:
    page = fn("app.render.page", "page")
    assert impact(PROFILE, [page]).cost == 125  # 25 + 100, not 25 + 200
    renamed = ChangedFunction("app.render.view", "app/render.py", "renamed", 1, "view",
                              old_name="app.render.page")  # fmt: skip
    diff = impact(PROFILE, [renamed])
    assert diff.functions[0].cost == 125  # found under its old name
    assert diff.cost == 0 and diff.endpoints == ()


def test_frames_match_by_name_and_file() -> None:
    lookup = ChangedFunction("app.search.Index.lookup", "src/app/search.py", "modified", 1,
                             "Index.lookup")  # fmt: skip
    assert frame_matches(lookup, Frame("app.search.Index.lookup"))
    assert frame_matches(lookup, Frame("search.Index.lookup"))  # keeps a module part
    assert not frame_matches(lookup, Frame("Index.lookup"))  # any file's Index.lookup
    assert frame_matches(lookup, Frame("Index.lookup", "/srv/app/search.py"))
    assert not frame_matches(lookup, Frame("Index.lookup", "/srv/app/other.py"))
    go = ChangedFunction("store.(*Index).Lookup", "store/index.go", "modified", 1,
                         "(*Index).Lookup")  # fmt: skip
    assert frame_matches(go, Frame("github.com/acme/svc/store.(*Index).Lookup"))
    assert frame_matches(go, Frame("github.com/acme/svc/store.(*Index).Lookup.func1"))
    assert not frame_matches(go, Frame("github.com/acme/svc/other.(*Index).Lookup", "other/x.go"))
    rs = ChangedFunction("eng::pace::Schedule::next", "src/pace.rs", "modified", 1,
                         "Schedule::next")  # fmt: skip
    assert frame_matches(rs, Frame("eng::pace::Schedule::next::h0123456789abcdef"))
    assert frame_matches(rs, Frame("<eng::pace::Schedule as eng::Pacer>::next"))


def test_threshold_is_a_share_or_a_cost() -> None:
    diff = impact(PROFILE, [fn("app.store.save", "save")])  # 15 of 200
    assert decide(diff, parse_score_threshold("5%"))[0]
    assert not decide(diff, parse_score_threshold("0.1"))[0]
    assert decide(diff, parse_score_threshold("15"))[0]
    assert not decide(diff, parse_score_threshold("16"))[0]
    nothing = impact(PROFILE, [fn("app.other.f", "f")])
    assert decide(nothing, parse_score_threshold("0"))[1] == (
        "no function the diff modifies appears in the profile"
    )
    with pytest.raises(ConfigError, match="--threshold"):
        parse_score_threshold("lots")


def test_the_budget_takes_the_best_diffs_that_fit() -> None:
    scores = [("a", 0.2), ("b", 0.0), ("c", 0.5), ("d", 0.1)]
    assert within_budget(scores, budget_h=2.5, per_test_h=1.0) == ["c", "a"]
    assert within_budget(scores, budget_h=10, per_test_h=1.0) == ["c", "a", "d"]
    assert within_budget(scores, budget_h=0.5, per_test_h=1.0) == []
