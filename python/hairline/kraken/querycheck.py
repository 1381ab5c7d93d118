"""Whether a health metric's query comes to one value, known from the query alone, before
the test starts (pure).

A query must give one value (docs/kraken.md, "Queries"); :func:`~hairline.kraken.promql.evaluate`
refuses several, but only mid-run, after the fleet, the engine and the first weight change
(issue 31). Which labels a query's values carry follows from its form: a selector's
series carry their own labels (not known until scraped, ``instance`` among them); ``sum``,
``avg``, ``max`` and ``min`` keep the ``by`` labels alone; ``histogram_quantile`` drops
``le``; an operator keeps its vector side's labels (the left one's when both are vectors,
which match one to one). So ``rate(x[2s])`` over four servers is four values, ``sum by
(instance) (...)`` one per server, ``sum by (le) (...)`` one per bucket: each a file mistake.
So is a selector's ``instance="web9"`` that names no server the query reads: it never has data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hairline.kraken.promql import Aggregate, Binary, Call, Expr, Negate, Number, Selector

__all__ = ["Shape", "selectors", "several_values", "shape_of", "unknown_instances"]


@dataclass(frozen=True)
class Shape:
    """What a query gives: a number, or a vector whose values carry ``labels`` (None: a
    selector's own labels, unknown until scraped, ``instance`` among them)."""

    vector: bool
    labels: frozenset[str] | None = frozenset()


_SCALAR = Shape(vector=False)


def shape_of(expr: Expr) -> Shape:
    """The labels that can tell a query's values apart (:class:`Shape`)."""
    if isinstance(expr, Number):
        return _SCALAR
    if isinstance(expr, Selector):
        return Shape(vector=True, labels=None)
    if isinstance(expr, Negate):
        return shape_of(expr.expr)
    if isinstance(expr, Aggregate):
        inner = shape_of(expr.expr)
        by = frozenset(expr.by or ())
        return Shape(vector=True, labels=by if inner.labels is None else by & inner.labels)
    if isinstance(expr, Call):
        if expr.func == "histogram_quantile":
            buckets = shape_of(expr.args[1])
            labels = None if buckets.labels is None else buckets.labels - {"le"}
            return Shape(vector=True, labels=labels)
        return shape_of(expr.args[0])
    assert isinstance(expr, Binary)
    left, right = shape_of(expr.left), shape_of(expr.right)
    if not left.vector:
        return right
    if not right.vector or left.labels is not None:
        return left
    return right


def several_values(expr: Expr, servers: int) -> tuple[str, str] | None:
    """Why a query over ``servers`` servers' series gives several values, and the fix; None
    if it gives one (or none: a query without data is found at run time). With one server
    its ``instance`` label tells nothing apart, and a selector's other labels are not known
    until it is scraped, so it passes."""
    shape = shape_of(expr)
    if not shape.vector:
        return None
    aggregate = "aggregate it to one value: wrap it in sum(...), avg(...) or max(...)"
    if shape.labels is None:
        if servers <= 1:
            return None
        return (
            f"gives one value per server ({servers} servers under test), not one: "
            "its series are not aggregated",
            aggregate,
        )
    labels = shape.labels - {"instance"} if servers <= 1 else shape.labels
    if not labels:
        return None
    if labels == {"le"}:
        return (
            "gives one value per histogram bucket (le), not one",
            "take a quantile of the buckets: histogram_quantile(0.99, ...)",
        )
    per = "server (instance)" if labels == {"instance"} else ", ".join(sorted(labels))
    by = ", ".join(sorted(labels))
    return (
        f"gives one value per {per}, not one",
        f"{aggregate} without `by ({by})`",
    )


def selectors(expr: Expr) -> list[Selector]:
    """The query's selectors, in order."""
    if isinstance(expr, Selector):
        return [expr]
    if isinstance(expr, Aggregate | Negate):
        return selectors(expr.expr)
    if isinstance(expr, Call):
        return [s for arg in expr.args for s in selectors(arg)]
    if isinstance(expr, Binary):
        return [*selectors(expr.left), *selectors(expr.right)]
    return []


def unknown_instances(expr: Expr, servers: Sequence[str]) -> list[str]:
    """The servers that ``instance="NAME"`` matchers name and the query does not read (its
    series are only ``servers``'): such a selector never has data."""
    named = [
        m.value
        for s in selectors(expr)
        for m in s.matchers
        if m.label == "instance" and m.op == "=" and m.value not in servers
    ]
    return list(dict.fromkeys(named))
