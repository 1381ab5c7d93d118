"""Bayesian optimisation (HHVM section 5.2, as Ax does it): a GP surrogate whose noise is
each A/B's standard error, noisy expected improvement, batches by believing pending points.
Pure.

Until the history (the default included) and the pending configurations number
``initial``, the proposals come from a scrambled Sobol design over the unit cube, seeded by
the run's seed alone so that a resumed run continues the same design. Then each proposal
maximises NEI (gp.py) over a candidate set: every unused configuration of a finite space of
at most ``MAX_ENUMERATED``; otherwise Sobol points and perturbations of the best observed
configurations, snapped to real configurations by ``Space.decode``. A batch believes each
point chosen (and every pending one) at its posterior mean before choosing the next.

Infeasible configurations are left out of the GP (and never proposed again): a failure
says nothing of the objective's value there, and a feasibility model is not worth its
evaluations for the few infeasible points a tuning run meets.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

import numpy as np
from scipy.stats import qmc
from threadpoolctl import threadpool_limits

from hairline.tune.searchers.common import Taken, Told, draw_unexplored, rng_for, taken
from hairline.tune.searchers.gp import FloatArray, Posterior, fit, noisy_expected_improvement
from hairline.tune.space import Configuration, Space, neighbours

__all__ = ["default_initial", "propose_bo"]

P = ParamSpec("P")
R = TypeVar("R")

MAX_ENUMERATED = 4096
SOBOL_CANDIDATES_LOG2 = 9
# Perturbations of each of the best observed points, at each of these unit-cube widths.
LOCAL_CANDIDATES = 32
LOCAL_WIDTHS = (0.05, 0.15)
LOCAL_CENTRES = 4
DEFAULT_SAMPLES = 128


def default_initial(space: Space) -> int:
    """The design's size, the default included: 2d + 1 for d parameters."""
    return 2 * len(space.params) + 1


def _one_thread(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn`` with BLAS on one thread: the GP's matrices have tens of rows, and threads only
    contend (10 times slower on a busy 2-core machine)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with threadpool_limits(1):
            return fn(*args, **kwargs)

    return wrapper


@_one_thread
def propose_bo(
    space: Space,
    history: Sequence[Told],
    n: int,
    pending: Sequence[Configuration],
    seed: int,
    *,
    initial: int,
    samples: int,
) -> list[Configuration]:
    used = taken(space, history, pending)
    rng = rng_for(seed, history, pending, salt=3)
    out: list[Configuration] = []
    for config in _design(space, seed, initial - len(history) - len(pending), used):
        if len(out) == n:
            return out
        used.add(config)
        out.append(config)
    feasible = [t for t in history if t.observation.value is not None]
    if len(out) == n:
        return out
    if len(feasible) < 2:
        return out + draw_unexplored(space, rng, n - len(out), used)
    post = _fitted(space, feasible, seed)
    for config in [*pending, *out]:
        post = post.believe(space.encode(config))
    while len(out) < n:
        candidates = _candidates(space, rng, used, feasible)
        if not candidates:
            break
        points = np.array([space.encode(c) for c in candidates])
        score = noisy_expected_improvement(post, points, rng, samples)
        choice = candidates[int(np.argmax(score))]
        used.add(choice)
        out.append(choice)
        post = post.believe(space.encode(choice))
    return out


def _fitted(space: Space, feasible: Sequence[Told], seed: int) -> Posterior:
    x = np.array([space.encode(t.config) for t in feasible])
    y = np.array([float(t.observation.value or 0.0) for t in feasible])
    se = np.array([t.observation.se for t in feasible])
    return fit(x, y, se, seed=(seed + len(feasible)) % 2**32)


def _design(space: Space, seed: int, count: int, used: Taken) -> list[Configuration]:
    """The next ``count`` unused configurations of the run's Sobol design."""
    if count <= 0:
        return []
    sobol = qmc.Sobol(space.dims, scramble=True, rng=np.random.default_rng([seed % 2**63, 7]))
    out: list[Configuration] = []
    keys = set(used.keys)
    # Points that decode to a used configuration are skipped, so draw a few times more.
    for point in sobol.random_base2(max(int(np.ceil(np.log2(8 * count + 8))), 1)):
        config = space.decode(point)
        if space.key(config) not in keys:
            keys.add(space.key(config))
            out.append(config)
            if len(out) == count:
                break
    return out


def _candidates(
    space: Space, rng: np.random.Generator, used: Taken, feasible: Sequence[Told]
) -> list[Configuration]:
    size = space.size()
    if size is not None and size <= MAX_ENUMERATED:
        return [c for c in space.grid() if c not in used]
    points: list[FloatArray] = list(
        qmc.Sobol(space.dims, scramble=True, rng=rng).random_base2(SOBOL_CANDIDATES_LOG2)
    )
    ranked = sorted(feasible, key=lambda t: -float(t.observation.value or 0.0))
    configs: list[Configuration] = []
    for told in ranked[:LOCAL_CENTRES]:
        centre = space.encode(told.config)
        configs.extend(neighbours(space, told.config))
        for width in LOCAL_WIDTHS:
            noise = rng.normal(0.0, width, (LOCAL_CANDIDATES, space.dims))
            points.extend(np.clip(centre + noise, 0.0, 1.0))
    configs.extend(space.decode(p) for p in points)
    out: list[Configuration] = []
    keys: set[object] = set()
    for config in configs:
        key = space.key(config)
        if key not in keys and config not in used:
            keys.add(key)
            out.append(config)
    return out
