"""A differential flame graph's layout: two arms' stacks merged into one tree of frames
(pure).

Each arm's stacks come from the folded files the lab keeps per batch (``frame;frame;leaf
COUNT``, root first). A batch's counts are samples; divided by the batch's samples and
multiplied by the arm's CPU nanoseconds per request in that batch they become nanoseconds
per request (:func:`per_request`), the unit the function analysis compares, so arms that
served different numbers of requests, or were sampled for different times, compare.

The layout (:func:`flame_layout`) merges both arms' stacks into one tree, a frame per
distinct path from the root: a function on two paths is two frames. A frame's width is the
mean of the two arms' CPU per request on its path (the candidate's alone would hide what
the candidate no longer runs), children sit left to right in name order (the same order
for the same stacks, and equal paths of both arms in one place), and a frame's children
plus its own cost fill its width exactly. Children narrower than ``min_fraction`` of the
whole are pooled into one frame at the end of their siblings, so a graph of many tiny
frames stays readable and small.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "ROOT_NAME",
    "FlameFrame",
    "FlameLayout",
    "Stack",
    "flame_layout",
    "folded_counts",
    "per_request",
]

#: A path of function names from the root frame to a leaf.
Stack = tuple[str, ...]
#: The bottom frame: every stack of both arms.
ROOT_NAME = "all"


def folded_counts(text: str) -> dict[Stack, float]:
    """Folded stacks as lab/sampling.py writes them (``frame;frame;leaf COUNT``, root
    first) -> count per stack. A line without a count, an empty frame or a negative count
    is skipped: a flame graph must not fail over one bad line of a kept file."""
    counts: dict[Stack, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        stack, _, count_text = line.rpartition(" ")
        try:
            count = float(count_text)
        except ValueError:
            continue
        names = tuple(name.strip() for name in stack.split(";"))
        if not stack or not math.isfinite(count) or count <= 0 or not all(names):
            continue
        counts[names] = counts.get(names, 0.0) + count
    return counts


def per_request(batches: Iterable[tuple[Mapping[Stack, float], float]]) -> dict[Stack, float]:
    """Each stack's CPU nanoseconds per request, the mean over ``batches`` of (its share
    of the batch's samples) x (the batch's CPU ns per request); a batch without samples or
    without a finite CPU is left out. A stack absent from a batch cost nothing there."""
    kept = [
        (counts, total, cpu_ns)
        for counts, cpu_ns in batches
        if (total := sum(counts.values())) > 0 and math.isfinite(cpu_ns) and cpu_ns >= 0
    ]
    out: dict[Stack, float] = {}
    for counts, total, cpu_ns in kept:
        for stack, count in counts.items():
            out[stack] = out.get(stack, 0.0) + count / total * cpu_ns / len(kept)
    return out


@dataclass(frozen=True)
class FlameFrame:
    """One box of the graph: the path from the root to it, where it starts and how wide it
    is (ns per request, the mean of the arms), and each arm's CPU per request on the path
    (children included)."""

    path: Stack  # () for the root
    x_ns: float
    width_ns: float
    baseline_ns: float
    candidate_ns: float
    #: A pool of this many narrow sibling frames (0: one function's frame).
    pooled: int = 0

    @property
    def name(self) -> str:
        if self.pooled:
            return f"({self.pooled} narrow frames)"
        return self.path[-1] if self.path else ROOT_NAME

    @property
    def depth(self) -> int:
        return len(self.path)


@dataclass(frozen=True)
class FlameLayout:
    """The frames, root first then depth by depth, left to right; and which functions
    each arm ran at all (so a function only one ran is new or gone)."""

    frames: tuple[FlameFrame, ...]
    baseline_functions: frozenset[str] = field(default=frozenset())
    candidate_functions: frozenset[str] = field(default=frozenset())

    @property
    def total_ns(self) -> float:
        return self.frames[0].width_ns if self.frames else 0.0

    @property
    def depth(self) -> int:
        """The deepest frame's depth (0: the root alone)."""
        return max((f.depth for f in self.frames), default=0)


@dataclass
class _Node:
    #: CPU ns per request on the node's path, children included: [baseline, candidate].
    cost: list[float] = field(default_factory=lambda: [0.0, 0.0])
    children: dict[str, _Node] = field(default_factory=dict)
    #: A pool of this many narrow siblings.
    pooled: int = 0

    @property
    def width(self) -> float:
        return (self.cost[0] + self.cost[1]) / 2


def _tree(baseline: Mapping[Stack, float], candidate: Mapping[Stack, float]) -> _Node:
    root = _Node()
    for arm, stacks in enumerate((baseline, candidate)):
        for stack, cost in stacks.items():
            if not cost > 0:
                continue
            root.cost[arm] += cost
            node = root
            for name in stack:
                node = node.children.setdefault(name, _Node())
                node.cost[arm] += cost
    return root


def flame_layout(
    baseline: Mapping[Stack, float],
    candidate: Mapping[Stack, float],
    *,
    min_fraction: float = 0.0,
) -> FlameLayout:
    """The frames of ``baseline`` and ``candidate`` (stack -> CPU ns per request) merged;
    children under ``min_fraction`` of the root's width are pooled."""
    root = _tree(baseline, candidate)
    if not root.width > 0:
        return FlameLayout(())
    narrow = min_fraction * root.width
    frames: list[FlameFrame] = []
    # Breadth first, so frames come depth by depth and the root first; no recursion, so
    # perf's deepest stacks (127 frames and more) cannot hit Python's limit.
    level: list[tuple[Stack, float, _Node]] = [((), 0.0, root)]
    while level:
        below: list[tuple[Stack, float, _Node]] = []
        for path, x, node in level:
            frames.append(FlameFrame(path, x, node.width, node.cost[0], node.cost[1],
                                     pooled=node.pooled))  # fmt: skip
            at = x
            pool = _Node()
            for name in sorted(node.children):
                child = node.children[name]
                if child.width < narrow:
                    pool.cost = [pool.cost[0] + child.cost[0], pool.cost[1] + child.cost[1]]
                    pool.pooled += 1
                    continue
                below.append(((*path, name), at, child))
                at += child.width
            if pool.pooled:
                below.append(((*path, ""), at, pool))
        level = below
    return FlameLayout(
        frames=tuple(frames),
        baseline_functions=frozenset(name for s, c in baseline.items() if c > 0 for name in s),
        candidate_functions=frozenset(name for s, c in candidate.items() if c > 0 for name in s),
    )
