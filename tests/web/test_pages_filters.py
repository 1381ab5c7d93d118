"""The experiments list's filters from a query string, and where a login may send a
browser."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hairline.errors import HairlineError
from hairline.web.pages import safe_next
from hairline.web.queries import ExperimentFilter
from hairline.web.views_experiments import parse_filters


def test_empty_fields_filter_nothing() -> None:
    assert parse_filters({"service": "", "phase": " ", "before": "9"}) == ExperimentFilter()


def test_fields_and_days_become_a_filter_with_until_inclusive() -> None:
    got = parse_filters(
        {"service": "api", "phase": "active", "verdict": "fail", "kind": "ab",
         "since": "2026-11-01", "until": "2026-11-02"}
    )  # fmt: skip
    assert got.service == "api" and got.phase == "active" and got.verdict == "fail"
    assert got.since == datetime(2026, 11, 1, tzinfo=UTC).timestamp()
    assert got.until == datetime(2026, 11, 3, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("params", "named"),
    [({"since": "1 Nov"}, "since"), ({"until": "2026-13-01"}, "until"),
     ({"phase": "sleeping"}, "phase"), ({"verdict": "maybe"}, "verdict")],
)  # fmt: skip
def test_a_bad_field_is_named_with_its_fix(params: dict[str, str], named: str) -> None:
    with pytest.raises(HairlineError) as caught:
        parse_filters(params)
    assert named in str(caught.value) and caught.value.hint


@pytest.mark.parametrize(
    ("target", "goes"),
    [("/aa", "/aa"), ("/experiments?phase=done", "/experiments?phase=done"),
     ("//evil.example/x", "/experiments"), ("https://evil.example", "/experiments"),
     ("/\\evil.example", "/experiments"), ("", "/experiments")],
)  # fmt: skip
def test_login_sends_a_browser_only_to_a_path_of_this_site(target: str, goes: str) -> None:
    assert safe_next(target) == goes
