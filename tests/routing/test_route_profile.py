"""Profiles from folded stacks and JSON; mistakes named by file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.errors import DataError
from hairline.routing.profile import parse_profile, read_profile


def test_folded_stacks_charge_every_frame_below_the_endpoint(tmp_path: Path) -> None:
    path = tmp_path / "profile.folded"
    path.write_text(
        "# from /debug/profile\n"
        "/api/op/3;op_common_0 1234\n"
        "/api/op/3;render;escape 56\n"
        "/api/op/3;render 4\n"
        "/api/op/4;op_g0_f1 10\n"
    )
    profile = read_profile(path)
    assert profile.endpoints == {
        "/api/op/3": {"op_common_0": 1234.0, "render": 60.0, "escape": 56.0},
        "/api/op/4": {"op_g0_f1": 10.0},
    }
    assert profile.functions == ("escape", "op_common_0", "op_g0_f1", "render")
    assert profile.cost("/api/op/3") == 1294.0


def test_json_profiles_give_costs_directly() -> None:
    profile = parse_profile('{"endpoints": {"/api/op/1": {"fn_a": 120, "fn_b": 3.5}}}')
    assert profile.endpoints == {"/api/op/1": {"fn_a": 120.0, "fn_b": 3.5}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("/a;f 1\n/a;g lots\n", r"p.folded:2: '/a;g lots' does not end in a count"),
        ("/a;f -3\n", r"p.folded:1: '/a;f -3' does not end in a count"),
        ("/a;;f 3\n", r"p.folded:1: '/a;;f' has an empty frame"),
        ("justonefield\n", r"p.folded:1: 'justonefield' does not end in a count"),
        ("# nothing\n", "has no stack"),
        ('{"endpoints": [1]}', 'no "endpoints" object'),
        ('{"endpoints": {"/a": {"f": "x"}}}', r'"endpoints"."/a"."f" is \'x\''),
        ('{"endpoints": {"/a": 3}}', r'"endpoints"."/a" is not an object'),
        ('{\n"endpoints": }', r"p.folded:2: not valid JSON"),
    ],
)
def test_mistakes_name_the_place_and_the_fix(text: str, message: str) -> None:
    with pytest.raises(DataError, match=message) as caught:
        parse_profile(text, source="p.folded")
    assert caught.value.hint


def test_a_missing_file_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot read the profile"):
        read_profile(tmp_path / "nope.folded")
