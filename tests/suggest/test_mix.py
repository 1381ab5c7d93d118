"""The experiment's trace re-mixed to the endpoints a diff reaches, in their cost shares."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hairline.config.suggest import why_notes
from hairline.errors import DataError
from hairline.profile.formats import parse_folded
from hairline.suggest.changes import ChangedFunction
from hairline.suggest.mix import remix
from hairline.suggest.score import impact
from hairline.trace.format import TraceRequest, read_trace, write_trace

# The change touches app.search.tokenize: 300 under GET /search, 70 under POST /item[1]
# (a label with glob characters), none under GET /home.
PROFILE = parse_folded(
    """\
GET /search;app.web.handle;app.search.tokenize 300
GET /search;app.web.handle 100
POST /item[1];app.store.save;app.search.tokenize 70
GET /home;app.render.page 500
"""
)
TOKENIZE = ChangedFunction("app.search.tokenize", "app/search.py", "modified", 2, "tokenize")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    requests = [
        TraceRequest(path=path, method=method, endpoint=label, ts_us=i * 1000)
        for i, (method, path, label) in enumerate(
            [("GET", "/search?q=1", "GET /search")] * 200
            + [("POST", "/item", "POST /item[1]")] * 900
            + [("GET", "/home", "GET /home")] * 3000
        )
    ]
    return write_trace(tmp_path / "trace.jsonl", {"source": "test"}, requests)


def test_the_mix_matches_the_profile_shares_within_one_percent(trace: Path, tmp_path: Path) -> None:
    diff = impact(PROFILE, [TOKENIZE])
    out = tmp_path / "suggested.jsonl"
    result, why = remix(trace, diff, out=out, base="main", head="change", count=4000)
    labels = Counter(r.label for r in read_trace(out).requests)
    assert set(labels) == {"GET /search", "POST /item[1]"}
    total = sum(labels.values())
    for share in diff.endpoints:
        assert labels[share.endpoint] / total == pytest.approx(share.share, abs=0.01)
    assert labels["GET /search"] / total == pytest.approx(300 / 370, abs=0.01)
    assert [(e.endpoint, e.requests) for e in why.endpoints] == [
        ("GET /search", 3243), ("POST /item[1]", 757)
    ]  # fmt: skip
    assert why.functions[0].name == "app.search.tokenize"
    assert why.functions[0].share == pytest.approx(370 / 970)
    assert result.with_replacement  # 200 search requests repeated to reach 3,243
    (note,) = why_notes(why)
    assert "why these endpoints: change (against main) modifies app.search.tokenize" in note


def test_by_default_as_many_requests_as_the_trace_has_of_them(trace: Path, tmp_path: Path) -> None:
    _, why = remix(trace, impact(PROFILE, [TOKENIZE]), out=tmp_path / "s.jsonl", base="a",
                   head="b")  # fmt: skip
    assert sum(e.requests for e in why.endpoints) == 1100


def test_endpoints_the_trace_lacks_are_named(trace: Path, tmp_path: Path) -> None:
    profile = parse_folded("GET /gone;app.search.tokenize 5\nGET /search;app.search.tokenize 5\n")
    _, why = remix(trace, impact(profile, [TOKENIZE]), out=tmp_path / "s.jsonl", base="a",
                   head="b")  # fmt: skip
    assert why.missing == ["GET /gone"]
    assert "not in the trace were left out: GET /gone" in why_notes(why)[1]
    only_gone = parse_folded("GET /gone;app.search.tokenize 5\n")
    with pytest.raises(DataError, match="none of the endpoints the change reaches"):
        remix(trace, impact(only_gone, [TOKENIZE]), out=tmp_path / "t.jsonl", base="a", head="b")


def test_a_modified_and_renamed_function_keeps_its_old_name_for_the_reports(
    trace: Path, tmp_path: Path
) -> None:
    """The baseline's profile knows the old name, the candidate's the new: both are stored,
    so the report can mark the function in either arm's stacks."""
    moved = ChangedFunction("app.search.split_words", "app/search.py", "modified", 3,
                            "split_words", old_name="app.search.tokenize")  # fmt: skip
    _, why = remix(trace, impact(PROFILE, [moved]), out=tmp_path / "s.jsonl", base="a", head="b")
    [function] = why.functions
    assert function.old_name == "app.search.tokenize"
    assert function.names == ("app.search.split_words", "app.search.tokenize")
    _, plain = remix(trace, impact(PROFILE, [TOKENIZE]), out=tmp_path / "t.jsonl", base="a",
                     head="b")  # fmt: skip
    assert plain.functions[0].old_name is None
