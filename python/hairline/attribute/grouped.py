"""Quantile regression of grouped rows: few distinct design rows (a factorial design's
treatments), each with many weighted values, refitted once per bootstrap replicate.

A replicate moves each treatment's fitted quantile a little from the point estimate's, so
only the values near it can change side. Each refit keeps, per treatment, a window of its
distinct values around the point's fitted value and folds the values below and above the
window into one row each (their weighted sums; stats/quantreg.py says why the folded
problem has the same optimum when every folded value keeps its side). A treatment's rows
share one design row, so "every folded value keeps its side" is one comparison per side:
the fitted value must lie between the largest value folded below and the smallest folded
above. Where it does not, that treatment's window widens and the replicate is solved again.
A refit then costs the windows (a few hundred rows), not every distinct value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from hairline.stats.quantreg import fit_quantile

__all__ = ["grouped_fit"]

# Distinct values kept on each side of a treatment's point fit; widened 4x on a miss.
_HALF_WINDOW = 64
_WIDEN = 4


def grouped_fit(
    design: NDArray[np.float64],
    cells: Sequence[tuple[NDArray[np.float64], NDArray[np.float64]]],
    replicate_counts: Sequence[NDArray[np.float64]],
    q: float,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The ``q`` quantile coefficients of the treatments' values (``cells``: per treatment,
    its sorted distinct values and a runs x values count matrix; ``design``: treatments x
    coefficients) and of each replicate (``replicate_counts``: per treatment, replicates x
    values), as (coefficients, replicates x coefficients)."""
    X = np.repeat(design, [values.size for values, _ in cells], axis=0)
    y = np.concatenate([values for values, _ in cells])
    point = fit_quantile(X, y, q, weights=np.concatenate([c.sum(axis=0) for _, c in cells]))
    centres = design @ point.coef
    replicates = np.array(
        [
            _windowed(design, [v for v, _ in cells], weights, centres, q, point.coef)
            for weights in zip(*replicate_counts, strict=True)
        ]
    )
    return point.coef, replicates


def _windowed(
    design: NDArray[np.float64],
    values: Sequence[NDArray[np.float64]],
    weights: Sequence[NDArray[np.float64]],
    centres: NDArray[np.float64],
    q: float,
    start: NDArray[np.float64],
) -> NDArray[np.float64]:
    half = [_HALF_WINDOW] * len(values)
    while True:
        rows: list[NDArray[np.float64]] = []
        ys: list[NDArray[np.float64]] = []
        ws: list[NDArray[np.float64]] = []
        bounds = []
        for t, (v, w) in enumerate(zip(values, weights, strict=True)):
            middle = int(np.searchsorted(v, centres[t]))
            low, high = max(0, middle - half[t]), min(v.size, middle + half[t])
            rows.append(np.repeat(design[t : t + 1], high - low, axis=0))
            ys.append(v[low:high])
            ws.append(w[low:high])
            for side in (slice(0, low), slice(high, v.size)):
                mass = float(w[side].sum())
                if mass > 0:
                    rows.append(design[t : t + 1] * mass)
                    ys.append(np.array([w[side] @ v[side]]))
                    ws.append(np.ones(1))
            bounds.append((v[low - 1] if low else -np.inf, v[high] if high < v.size else np.inf))
        coef = fit_quantile(
            np.concatenate(rows), np.concatenate(ys), q, weights=np.concatenate(ws), start=start
        ).coef
        fitted = design @ coef
        missed = [t for t, (below, above) in enumerate(bounds) if not below <= fitted[t] <= above]
        if not missed:
            return coef
        for t in missed:
            half[t] *= _WIDEN
