"""The differential flame graph's layout against hand-computed frames: widths, places,
order, pooling, and the folded files' counts turned into CPU per request."""

from __future__ import annotations

import pytest

from hairline.profile.flame import FlameFrame, flame_layout, folded_counts, per_request

# Two arms' stacks in ns per request: B spends 20 more in escape, no longer runs audit,
# and runs a new compress; render appears under two callers.
BASELINE = {
    ("main", "handle", "rank"): 500.0,
    ("main", "handle", "render", "escape"): 100.0,
    ("main", "handle", "render"): 200.0,
    ("main", "batch", "render"): 80.0,
    ("main", "audit"): 20.0,
    ("main",): 100.0,
}
CANDIDATE = {
    ("main", "handle", "rank"): 500.0,
    ("main", "handle", "render", "escape"): 120.0,
    ("main", "handle", "render"): 200.0,
    ("main", "batch", "render"): 80.0,
    ("main", "compress"): 40.0,
    ("main",): 100.0,
}


def by_path(frames: tuple[FlameFrame, ...]) -> dict[tuple[str, ...], FlameFrame]:
    return {f.path: f for f in frames}


def children(frames: tuple[FlameFrame, ...], parent: FlameFrame) -> list[FlameFrame]:
    return [f for f in frames if f.depth == parent.depth + 1 and f.path[:-1] == parent.path]


def test_each_frame_is_the_mean_of_the_arms_and_its_children_fill_it_left_to_right() -> None:
    layout = flame_layout(BASELINE, CANDIDATE)
    frames = layout.frames
    at = by_path(frames)
    assert at[()].width_ns == pytest.approx((1000 + 1040) / 2)
    assert (at[()].baseline_ns, at[()].candidate_ns) == (1000.0, 1040.0)
    render = at[("main", "handle", "render")]
    assert (render.baseline_ns, render.candidate_ns, render.width_ns) == (300.0, 320.0, 310.0)
    assert at[("main", "audit")].width_ns == 10.0  # gone: half its baseline cost
    for frame in frames:
        below = children(frames, frame)
        own = sum(c for s, c in BASELINE.items() if s == frame.path) + sum(
            c for s, c in CANDIDATE.items() if s == frame.path
        )
        # The children plus the frame's own cost (the stacks ending at it) fill it exactly.
        assert sum(c.width_ns for c in below) + own / 2 == pytest.approx(frame.width_ns)
        x = frame.x_ns
        for child in below:  # side by side from the parent's left edge, no gap
            assert child.x_ns == pytest.approx(x)
            x += child.width_ns
    assert layout.depth == 4 and layout.total_ns == pytest.approx(1020.0)


def test_a_function_on_two_paths_is_two_frames() -> None:
    frames = flame_layout(BASELINE, CANDIDATE).frames
    render = [f for f in frames if f.name == "render"]
    assert [f.path for f in render] == [("main", "batch", "render"), ("main", "handle", "render")]
    assert [f.width_ns for f in render] == [80.0, 310.0]


def test_siblings_sit_in_name_order_whatever_the_order_of_the_stacks() -> None:
    layout = flame_layout(BASELINE, CANDIDATE)
    again = flame_layout(dict(reversed(BASELINE.items())), dict(reversed(CANDIDATE.items())))
    assert again == layout
    main = by_path(layout.frames)[("main",)]
    assert [f.name for f in children(layout.frames, main)] == [
        "audit", "batch", "compress", "handle"
    ]  # fmt: skip
    # Root first, then depth by depth.
    assert [f.depth for f in layout.frames] == sorted(f.depth for f in layout.frames)


def test_narrow_siblings_are_pooled_into_one_frame_after_the_others() -> None:
    # 2% of the whole: audit (10) and compress (20) are narrower than 2.5% of 1020.
    frames = flame_layout(BASELINE, CANDIDATE, min_fraction=0.025).frames
    main = by_path(frames)[("main",)]
    below = children(frames, main)
    assert [f.name for f in below] == ["batch", "handle", "(2 narrow frames)"]
    pool = below[-1]
    assert pool.pooled == 2 and (pool.baseline_ns, pool.candidate_ns) == (20.0, 40.0)
    assert pool.x_ns == pytest.approx(below[1].x_ns + below[1].width_ns)
    assert sum(f.width_ns for f in below) + 100.0 == pytest.approx(main.width_ns)
    assert not [f for f in frames if f.path[:2] == ("main", "audit")]


def test_functions_only_one_arm_ran_are_named_and_an_empty_profile_has_no_frame() -> None:
    layout = flame_layout(BASELINE, CANDIDATE)
    assert layout.baseline_functions - layout.candidate_functions == {"audit"}
    assert layout.candidate_functions - layout.baseline_functions == {"compress"}
    assert flame_layout({}, {}).frames == ()


def test_folded_counts_keep_names_whole_and_skip_lines_that_are_not_stacks() -> None:
    text = (
        "main;std::vector<int, std::allocator<int> >::push_back(int const&) 7\n"
        "main;<T as core::fmt::Debug>::fmt 3\n"
        "main;<T as core::fmt::Debug>::fmt 2\n"
        "# a comment\n\nno count here\nmain;;leaf 4\nmain;x -1\n"
    )
    assert folded_counts(text) == {
        ("main", "std::vector<int, std::allocator<int> >::push_back(int const&)"): 7.0,
        ("main", "<T as core::fmt::Debug>::fmt"): 5.0,
    }


def test_per_request_scales_each_batch_by_its_cpu_so_sample_counts_do_not_matter() -> None:
    """Two batches of one arm: 100 samples at 1,000 ns per request, then 400 samples (a
    longer window, or more requests) at 1,200 ns: each batch's split times its own CPU
    per request, then the mean."""
    first = {("main", "a"): 25.0, ("main", "b"): 75.0}
    second = {("main", "a"): 200.0, ("main", "b"): 200.0}
    ns = per_request([(first, 1000.0), (second, 1200.0), ({}, 5.0)])
    assert ns[("main", "a")] == pytest.approx((250 + 600) / 2)
    assert ns[("main", "b")] == pytest.approx((750 + 600) / 2)
    assert per_request([]) == {}
