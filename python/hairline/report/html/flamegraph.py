"""The differential flame graph of a candidate against its baseline, as one SVG (pure).

The frames are profile/flame.py's: every path of both arms' stacks, as wide as the mean of
the arms' CPU nanoseconds per request on it, the root at the bottom. Each frame is coloured
by its function's **self** cost verdict (lab/functions.py): red where the function's own
code got slower, blue where it got faster, saturated only when the verdict is significant
after Benjamini-Hochberg, pale when the change was not, grey when the function was not
tested (under ``min_share`` of the CPU, or never the sampled leaf). Self, not inclusive: a
slower leaf makes every ancestor's inclusive cost slower too, and colouring by it would
paint the whole column down to the root, where the width already shows inclusive cost; by
self cost the colour sits on the function whose own work changed. Both verdicts are in
each frame's tooltip.

A function only the candidate ran is pale red with a dashed red outline (new, untested),
one only the baseline ran pale blue with a dashed blue outline (gone); a function the diff
suggester named (``--suggested-by``) has a solid black outline. The SVG needs no script,
style sheet or URL: a ``<title>`` per frame is its tooltip, its one ``<style>`` is scoped
to its own class. Every name is escaped (C++ and Rust symbols hold ``<``, ``&`` and
quotes).
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from hairline.lab.functions import FunctionAnalysis, FunctionChange
from hairline.profile.flame import FlameFrame, FlameLayout
from hairline.profile.functions import SELF, TOTAL

__all__ = ["FLAME_WIDTH_PX", "MIN_FRAME_PX", "Paint", "flame_svg", "paint"]

FLAME_WIDTH_PX = 960
#: Frames narrower than this are pooled by the layout (``min_fraction`` = this / width).
MIN_FRAME_PX = 1.0
_FRAME_H, _GAP = 16, 1
_LEGEND_H = 26
_CHAR_PX = 6.4  # 11 px monospace: a character's advance, to cut labels that do not fit
# Past this relative effect the colour is as deep as it gets.
_FULL_EFFECT = 0.25
_SLOWER_HUE, _FASTER_HUE, _SHIFT_HUE = 2, 214, 275
_NEW_STROKE, _GONE_STROKE, _SUGGESTED_STROKE = "#991b1b", "#1e3a8a", "#111827"
_GREY, _POOL_GREY = "#dcdfe4", "#eceef1"
# XML 1.0 allows no control character but tab, newline and carriage return, not even
# escaped: a symbol holding one would make the whole SVG unreadable.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _x(value: object) -> str:
    """Text or an attribute value, escaped for XML and HTML alike."""
    return html.escape(_NOT_XML.sub("\ufffd", str(value)), quote=True)


@dataclass(frozen=True)
class Paint:
    """A frame's fill, whether its label needs light text, and the legend's word for it."""

    fill: str
    key: str  # "slower", "faster", "not significant", "shift", "not tested", "new", "gone"
    dark: bool = False


def _depth(change: FunctionChange) -> float:
    """0..1: how large the effect is, for the colour's depth."""
    rel = abs(change.effect_rel)
    if not math.isfinite(rel):
        return 1.0
    return min(rel / _FULL_EFFECT, 1.0)


def paint(change: FunctionChange | None, status: str = "") -> Paint:
    """The colour of a function whose self cost compared as ``change`` (None: not tested);
    ``status`` "new" or "gone" when only one arm ran it (untested: pale, by direction)."""
    if status == "new":
        return Paint(f"hsl({_SLOWER_HUE},45%,88%)", "new")
    if status == "gone":
        return Paint(f"hsl({_FASTER_HUE},45%,88%)", "gone")
    if change is None or change.verdict in ("new", "gone"):
        return Paint(_GREY, "not tested")
    if change.verdict == "shift":
        return Paint(f"hsl({_SHIFT_HUE},42%,78%)", "shift")
    hue = _SLOWER_HUE if change.effect_ns > 0 else _FASTER_HUE
    if change.verdict in ("regression", "improvement"):
        # Saturated: a BH-controlled finding. Deeper for a larger effect.
        light = 58 - 16 * _depth(change)
        return Paint(f"hsl({hue},78%,{light:.0f}%)", "slower" if hue == _SLOWER_HUE
                     else "faster", dark=light < 52)  # fmt: skip
    if not math.isfinite(change.effect_rel) or abs(change.effect_rel) < 0.001:
        return Paint(_GREY, "not significant")
    light = 92 - 6 * _depth(change)
    return Paint(f"hsl({hue},45%,{light:.0f}%)", "not significant")


def _ns(x: float) -> str:
    return f"{x:,.1f}" if math.isfinite(x) else "n/a"


def _verdict_line(label: str, change: FunctionChange | None, min_share: float) -> str:
    if change is None:
        return f"{label}: not tested (under {min_share:.1%} of the CPU in both arms, or none)"
    if change.verdict in ("new", "gone"):
        return f"{label}: {change.verdict}, {_ns(change.effect_ns)} ns per request (untested)"
    rel = f" ({change.effect_rel:+.1%})" if math.isfinite(change.effect_rel) else ""
    lo, hi = change.ci_ns
    interval = f", interval [{_ns(lo)}, {_ns(hi)}]" if math.isfinite(lo) else ""
    verdict: str = change.verdict
    if change.verdict == "shift":
        verdict = "shift with " + ", ".join(change.shift_with)
    p = f", BH-adjusted p {change.p_adjusted:.3g}" if math.isfinite(change.p_adjusted) else ""
    return f"{label}: {verdict}, {change.effect_ns:+,.1f} ns per request{rel}{interval}{p}"


def _tooltip(
    frame: FlameFrame,
    analysis: FunctionAnalysis,
    changes: Mapping[tuple[str, str], FunctionChange],
    status: str,
    suggested: bool,
) -> str:
    a, b = analysis.baseline, analysis.candidate
    here = frame.candidate_ns - frame.baseline_ns
    rel = f" ({here / frame.baseline_ns:+.1%})" if frame.baseline_ns > 0 else ""
    lines = [
        frame.name,
        f"on this path: {a} {_ns(frame.baseline_ns)}, {b} {_ns(frame.candidate_ns)} ns per "
        f"request{rel}",
    ]
    if frame.pooled:
        lines.append("frames too narrow to draw, pooled")
    elif frame.depth > 0:
        name = frame.path[-1]
        lines.append(_verdict_line("self", changes.get((SELF, name)), analysis.min_share))
        inclusive = changes.get((TOTAL, name))
        if inclusive is not None:
            lines.append(_verdict_line("inclusive", inclusive, analysis.min_share))
        if status:
            lines.append(f"{status}: only {b if status == 'new' else a} ran it")
        if suggested:
            lines.append("named by the diff suggester (--suggested-by)")
    return "\n".join(lines)


def _legend(suggested: bool) -> list[str]:
    items: list[tuple[str, str, str]] = [  # (label, fill, stroke)
        ("slower (significant)", f"hsl({_SLOWER_HUE},78%,50%)", "none"),
        ("faster (significant)", f"hsl({_FASTER_HUE},78%,50%)", "none"),
        ("", f"hsl({_SLOWER_HUE},45%,88%)", "none"),
        ("not significant", f"hsl({_FASTER_HUE},45%,88%)", "none"),
        ("cost shifted", f"hsl({_SHIFT_HUE},42%,78%)", "none"),
        ("not tested", _GREY, "none"),
        ("new", f"hsl({_SLOWER_HUE},45%,88%)", _NEW_STROKE),
        ("gone", f"hsl({_FASTER_HUE},45%,88%)", _GONE_STROKE),
    ]
    if suggested:
        items.append(("named by the diff", "#ffffff", _SUGGESTED_STROKE))
    out, x = [], 2.0
    for label, fill, stroke in items:
        dash = ' stroke-dasharray="3 2"' if stroke in (_NEW_STROKE, _GONE_STROKE) else ""
        width = "2" if stroke == _SUGGESTED_STROKE else "1.5"
        out.append(f'<rect x="{x:.1f}" y="6" width="14" height="12" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{width}"{dash}/>')  # fmt: skip
        x += 16 if not label else 18
        if label:
            out.append(f'<text class="key" x="{x:.1f}" y="16">{_x(label)}</text>')
            x += len(label) * 6.1 + 14
    return out


def _label(name: str, width_px: float) -> str:
    """As much of ``name`` as fits: whole, else without its path (``a::b::f`` -> ``f``,
    ``pkg.mod.f`` -> ``f``), else cut."""
    fits = int((width_px - 6) / _CHAR_PX)
    if fits < 3:
        return ""
    tail = re.split(r"::|\.(?=[^.]+$)", name)[-1]
    if len(name) <= fits:
        return name
    # A tail that starts as a name does (not "6]" of "[unknown in libc.so.6]").
    text = tail if re.match(r"[A-Za-z_~]", tail) else name
    return text if len(text) <= fits else text[: fits - 1] + "…"


def flame_svg(
    layout: FlameLayout,
    analysis: FunctionAnalysis,
    *,
    suggested: frozenset[str] = frozenset(),
    width_px: int = FLAME_WIDTH_PX,
) -> str:
    """The differential flame graph of ``analysis``'s candidate against its baseline, its
    frames from ``layout``; ``suggested``: the profile's names of the diff suggester's
    functions, outlined."""
    total = layout.total_ns
    if not layout.frames or not total > 0:
        return ""
    changes = {(c.kind, c.function): c for c in analysis.changes}
    scale = width_px / total
    top = _LEGEND_H
    height = top + (layout.depth + 1) * (_FRAME_H + _GAP) + 2
    only_a = layout.baseline_functions - layout.candidate_functions
    only_b = layout.candidate_functions - layout.baseline_functions
    body: list[str] = []
    for frame in layout.frames:
        w = frame.width_ns * scale
        if w < 0.3:
            continue  # a pool of slivers: nothing a reader could point at
        x = frame.x_ns * scale
        y = top + (layout.depth - frame.depth) * (_FRAME_H + _GAP)
        name = frame.path[-1] if frame.path and not frame.pooled else ""
        status = "new" if name in only_b else "gone" if name in only_a else ""
        if frame.pooled:
            colour = Paint(_POOL_GREY, "pooled")
        elif frame.depth == 0:
            colour = Paint(_GREY, "all")
        else:
            colour = paint(changes.get((SELF, name)), status)
        marked = bool(name) and name in suggested
        stroke = (
            f' stroke="{_SUGGESTED_STROKE}" stroke-width="2"' if marked
            else ' stroke="#ffffff" stroke-width="0.5"'
        )  # fmt: skip
        tip = _tooltip(frame, analysis, changes, status, marked)
        parts = [
            f"<g><title>{_x(tip)}</title>",
            f'<rect x="{x:.2f}" y="{y}" width="{max(w, 0.3):.2f}" height="{_FRAME_H}" '
            f'fill="{colour.fill}"{stroke}/>',
        ]
        if status and w > 3:
            edge = _NEW_STROKE if status == "new" else _GONE_STROKE
            parts.append(
                f'<rect x="{x + 1.5:.2f}" y="{y + 1.5}" width="{w - 3:.2f}" '
                f'height="{_FRAME_H - 3}" fill="none" stroke="{edge}" stroke-width="1.5" '
                'stroke-dasharray="3 2"/>'
            )
        label = _label(frame.name, w)
        if label:
            light = ' class="on-dark"' if colour.dark else ""
            parts.append(f'<text x="{x + 3:.2f}" y="{y + 12}"{light}>{_x(label)}</text>')
        body.append("".join(parts) + "</g>")
    title = (
        f"{analysis.candidate} against {analysis.baseline}: CPU per request by stack, "
        f"{_ns(total)} ns wide (the mean of both arms); colour: each function's self cost "
        f"verdict at a false discovery rate of {analysis.fdr:.0%}"
    )
    style = (
        "<style>.hl-flame text{font:11px ui-monospace,SFMono-Regular,Menlo,monospace;"
        "fill:#111827}.hl-flame text.on-dark{fill:#ffffff}.hl-flame text.key{font:11px "
        "system-ui,sans-serif;fill:#374151}</style>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="hl-flame" role="img" '
        f'viewBox="0 0 {width_px} {height}" width="{width_px}" height="{height}" '
        f'aria-label="{_x(title)}"><title>{_x(title)}</title>{style}'
        + "".join(_legend(bool(suggested)))
        + "".join(body)
        + "</svg>"
    )
