"""kit.durations: one grammar for every duration a user writes, each caller's units."""

from __future__ import annotations

import pytest

from hairline.kit.durations import duration_s


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("30s", 30.0), ("15m", 900.0), ("2h", 7200.0), ("1d", 86400.0),
     ("1.5h", 5400.0), (" 2 h ", 7200.0)],
)  # fmt: skip
def test_a_number_and_a_unit_are_seconds(text: str, seconds: float) -> None:
    assert duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "m", "-15m", "15 minutes", "1w", "1e3s", "15mm"])
def test_anything_else_is_none(text: str) -> None:
    assert duration_s(text) is None


def test_a_caller_names_the_units_that_make_sense_for_it() -> None:
    assert duration_s("500ms", units=("m", "h", "d")) is None
    assert duration_s("2h", units=("m", "h", "d")) == 7200.0
