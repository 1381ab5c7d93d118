"""grouped_fit: each replicate refitted on windows of values around the point fit reaches the
optimum of all its rows, also when a window must widen."""

from __future__ import annotations

import numpy as np
import pytest

from hairline.attribute.grouped import grouped_fit
from hairline.stats.quantreg import check_loss

# Four treatments of a 2x2 design, main effects only (not saturated).
DESIGN = np.array([[1, -0.5, -0.5], [1, 0.5, -0.5], [1, -0.5, 0.5], [1, 0.5, 0.5]])


def cells_and_replicates(seed: int, replicates: int = 6):
    rng = np.random.default_rng(seed)
    cells, counts = [], []
    for t in range(4):
        # Thousands of distinct values per treatment, so the windows leave most out.
        values = np.unique(np.round(rng.lognormal(6 + 0.2 * t, 0.5, 3000), 1))
        runs = rng.integers(0, 3, size=(3, values.size)).astype(float)
        cells.append((values, runs))
        picked = rng.integers(0, 3, size=(replicates, 3))
        counts.append(np.stack([runs[p].sum(axis=0) for p in picked]))
    return cells, counts


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_every_replicate_reaches_the_optimum_of_all_its_rows(q):
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input."""
    cells, counts = cells_and_replicates(seed=1)
    X = np.repeat(DESIGN, [v.size for v, _ in cells], axis=0)
    y = np.concatenate([v for v, _ in cells])

    coef, replicates = grouped_fit(DESIGN, cells, counts, q)

    point_weights = np.concatenate([c.sum(axis=0) for _, c in cells])
    assert check_loss(X, y, coef, q, point_weights) > 0
    for b, fitted in enumerate(replicates):
        weights = np.concatenate([c[b] for c in counts])
        best = check_loss(X, y, coef, q, weights)
        # No coefficient vector does better on the replicate's rows: compare with the point
        # fit (a feasible answer) and with small moves around the replicate's own answer.
        loss = check_loss(X, y, fitted, q, weights)
        assert loss <= best * (1 + 1e-9)
        for move in np.eye(3) * 0.05:
            assert loss <= check_loss(X, y, fitted + move, q, weights) * (1 + 1e-9)
            assert loss <= check_loss(X, y, fitted - move, q, weights) * (1 + 1e-9)


def test_a_replicate_far_from_the_point_fit_widens_its_window():
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input."""
    cells, counts = cells_and_replicates(seed=2, replicates=1)
    # The replicate's first treatment keeps only its largest values, so its fitted value
    # moves far past the window around the point fit's.
    values, _ = cells[0]
    counts[0][0, : values.size - 200] = 0
    X = np.repeat(DESIGN, [v.size for v, _ in cells], axis=0)
    y = np.concatenate([v for v, _ in cells])
    weights = np.concatenate([c[0] for c in counts])

    _, (fitted,) = grouped_fit(DESIGN, cells, counts, 0.5)

    loss = check_loss(X, y, fitted, 0.5, weights)
    for move in np.eye(3) * 0.05:
        assert loss <= check_loss(X, y, fitted + move, 0.5, weights) * (1 + 1e-9)
        assert loss <= check_loss(X, y, fitted - move, 0.5, weights) * (1 + 1e-9)
