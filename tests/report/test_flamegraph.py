"""The differential flame graph's SVG: colours by verdict, new and gone functions, the diff
suggester's functions, and names that hold markup. Each SVG is read back with
xml.etree, as any SVG reader would."""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ET

from hairline.lab.functions import FunctionAnalysis, FunctionChange, FunctionVerdict
from hairline.profile.flame import flame_layout
from hairline.report.html.flamegraph import flame_svg, paint

SVG = "{http://www.w3.org/2000/svg}"
SCRIPT = "<script>alert('x & \"y\"')</script>"

BASELINE = {
    ("main", "handle", "rank"): 500.0,
    ("main", "handle", "render", "escape"): 100.0,
    ("main", "handle", "render"): 200.0,
    ("main", "audit"): 20.0,
    ("main", SCRIPT): 60.0,
}
CANDIDATE = {
    ("main", "handle", "rank"): 505.0,
    ("main", "handle", "render", "escape"): 120.0,
    ("main", "handle", "render"): 200.0,
    ("main", "compress"): 40.0,
    ("main", SCRIPT): 40.0,
}


def change(
    function: str, verdict: FunctionVerdict, effect_rel: float, kind: str = "self"
) -> FunctionChange:
    base = 100.0
    return FunctionChange(
        function=function, kind=kind, mean_a_ns=base, mean_b_ns=base * (1 + effect_rel),
        effect_ns=base * effect_rel, effect_rel=effect_rel,
        ci_ns=(base * effect_rel - 5, base * effect_rel + 5), p_value=0.001,
        p_adjusted=0.004 if verdict != "no change" else 0.6, share=0.1, verdict=verdict,
    )  # fmt: skip


ANALYSIS = FunctionAnalysis(
    candidate="B", baseline="A", fdr=0.05, min_share=0.005, trials=10,
    samples_per_batch=20_000.0,
    changes=(
        change("escape", "regression", 0.20),
        change("render", "regression", 0.06, kind="total"),
        change("rank", "no change", 0.01),
        change(SCRIPT, "improvement", -0.33),
        change("compress", "new", math.nan),
    ),
)  # fmt: skip


def frames_of(svg: str) -> dict[str, list[ET.Element]]:
    """Each frame's function name (its tooltip's first line) -> its elements (the group's
    rects; the first is the frame itself)."""
    root = ET.fromstring(svg)
    found: dict[str, list[ET.Element]] = {}
    for group in root.iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        assert title is not None and title.text
        found[title.text.splitlines()[0]] = list(group.iter(f"{SVG}rect"))
    return found


def hsl(fill: str) -> tuple[int, int, int]:
    match = re.fullmatch(r"hsl\((\d+),(\d+)%,(\d+)%\)", fill)
    assert match, fill
    h, s, lightness = (int(g) for g in match.groups())
    return h, s, lightness


def test_a_significant_regression_is_saturated_red_and_a_non_significant_change_pale() -> None:
    slower = hsl(paint(change("f", "regression", 0.2)).fill)
    faster = hsl(paint(change("f", "improvement", -0.2)).fill)
    pale = hsl(paint(change("f", "no change", 0.2)).fill)
    assert slower[0] < 15 and slower[1] >= 70 and slower[2] <= 60
    assert 200 < faster[0] < 230 and faster[1] >= 70
    assert pale[0] < 15 and pale[1] < 50 and pale[2] >= 85
    # A larger significant effect is deeper; untested functions are grey.
    assert hsl(paint(change("f", "regression", 0.02)).fill)[2] > slower[2]
    assert paint(None).key == "not tested" and not paint(None).fill.startswith("hsl")


def test_each_frame_is_coloured_by_its_functions_self_verdict() -> None:
    svg = flame_svg(flame_layout(BASELINE, CANDIDATE), ANALYSIS)
    frames = frames_of(svg)
    escape = hsl(frames["escape"][0].attrib["fill"])
    assert escape[0] < 15 and escape[1] >= 70  # significant: saturated red
    rank = hsl(frames["rank"][0].attrib["fill"])
    assert rank[1] < 50 and rank[2] >= 85  # +1%, not significant: pale
    # render's inclusive cost regressed (its callee did); its own did not: not red.
    assert not frames["render"][0].attrib["fill"].startswith("hsl(2,78%")
    title = ET.fromstring(svg).find(f"{SVG}title")
    assert title is not None and "self cost verdict" in (title.text or "")


def test_new_and_gone_functions_are_outlined_and_say_so() -> None:
    svg = flame_svg(flame_layout(BASELINE, CANDIDATE), ANALYSIS)
    frames = frames_of(svg)
    for name, stroke, hue in (("compress", "#991b1b", 2), ("audit", "#1e3a8a", 214)):
        frame, outline = frames[name]
        assert outline.attrib["stroke"] == stroke and outline.attrib["stroke-dasharray"]
        h, s, lightness = hsl(frame.attrib["fill"])  # untested: pale, red if new, blue if gone
        assert h == hue and s < 50 and lightness >= 85
    new_tip = re.search(r"<title>compress\n[^<]*", svg)
    assert new_tip and "new: only B ran it" in new_tip.group(0)
    assert "gone: only A ran it" in svg
    assert len(frames["escape"]) == 1  # both arms ran it: no outline


def test_a_name_holding_markup_stays_text() -> None:
    svg = flame_svg(flame_layout(BASELINE, CANDIDATE), ANALYSIS)
    root = ET.fromstring(svg)  # well-formed XML
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert "<script>" not in svg
    assert SCRIPT in frames_of(svg)  # read back whole, as text
    faster = hsl(frames_of(svg)[SCRIPT][0].attrib["fill"])
    assert 200 < faster[0] < 230 and faster[1] >= 70  # a significant improvement
    control = flame_svg(flame_layout({("main", "bad\x01name"): 1.0}, {}), ANALYSIS)
    ET.fromstring(control)  # a control character would make it unreadable


def test_the_diff_suggesters_functions_have_a_black_outline() -> None:
    layout = flame_layout(BASELINE, CANDIDATE)
    svg = flame_svg(layout, ANALYSIS, suggested=frozenset({"escape"}))
    frames = frames_of(svg)
    assert frames["escape"][0].attrib["stroke"] == "#111827"
    assert frames["rank"][0].attrib["stroke"] != "#111827"
    assert "named by the diff suggester" in svg and "named by the diff" in svg
    assert "named by the diff" not in flame_svg(layout, ANALYSIS)  # no legend entry either
