"""Profiles: folded stacks with the endpoint as root frame, pprof files, merged by summing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hairline.errors import DataError
from hairline.profile.formats import Frame, merge, parse_folded, pprof_bytes, read_profile


def test_folded_stacks_sum_and_keep_files() -> None:
    profile = parse_folded(
        "# production, 10 ms samples\n"
        "GET /search;app.handle (app/web.py:3);app.search.lookup 30\n"
        "GET /search;app.handle (app/web.py:3);app.search.lookup 12\n"
        "POST /item;app.handle (app/web.py:3) 8\n"
    )
    stack = ("GET /search", (Frame("app.handle", "app/web.py"), Frame("app.search.lookup")))
    assert profile.stacks[stack] == 42
    assert profile.endpoint_totals() == {"GET /search": 42, "POST /item": 8}
    assert profile.total == 50


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("GET /a;f x", "does not end in a count"),
        ("GET /a;;f 3", "empty frame"),
        ("42", "does not end in a count"),
    ],
)
def test_a_bad_folded_line_is_named_by_number(line: str, said: str) -> None:
    with pytest.raises(DataError, match=rf"p.folded:2: .*{said}"):
        parse_folded(f"GET /a;f 1\n{line}\n", source="p.folded")


@pytest.mark.parametrize("compress", [True, False])
def test_pprof_round_trips(tmp_path: Path, compress: bool) -> None:
    stacks = [
        (
            "GET /search",
            [Frame("main.handle", "cmd/web.go"), Frame("store.(*Index).Lookup", "store/index.go")],
            7,
        ),
        ("POST /item", [Frame("main.handle", "cmd/web.go")], 3),
    ]
    path = tmp_path / "cpu.pb.gz"
    path.write_bytes(
        pprof_bytes(stacks, period=("cpu", "nanoseconds", 10_000_000), compress=compress)
    )
    profile = read_profile(path)
    # samples x period: each sample stands for 10 ms of CPU
    assert profile.unit == "nanoseconds"
    assert profile.stacks == {
        (endpoint, tuple(frames)): value * 10_000_000 for endpoint, frames, value in stacks
    }


def test_pprof_without_the_endpoint_label_says_which_key(tmp_path: Path) -> None:
    path = tmp_path / "cpu.pb.gz"
    path.write_bytes(pprof_bytes([("GET /a", [Frame("f")], 1)], endpoint_label="handler"))
    with pytest.raises(DataError, match="no sample has the label 'endpoint'"):
        read_profile(path)
    assert read_profile(path, endpoint_label="handler").total == 1


def test_profiles_merge_by_summing_and_refuse_mixed_units() -> None:
    a = parse_folded("GET /a;f 2\n")
    b = parse_folded("GET /a;f 3\nGET /b;g 1\n")
    assert merge([a, b]).stacks == {("GET /a", (Frame("f"),)): 5, ("GET /b", (Frame("g"),)): 1}
    from hairline.profile.formats import parse_pprof

    ns = parse_pprof(pprof_bytes([("GET /a", [Frame("f")], 1)], sample_type=("cpu", "nanoseconds")))
    with pytest.raises(DataError, match="different units"):
        merge([a, ns])
