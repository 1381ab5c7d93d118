"""The searchers on small spaces with known answers: the contract every one keeps (new,
distinct, deterministic, never the default, infeasible points left alone), and what each
is for (hill climbs, grid exhausts, single sweeps, BO finds a noisy optimum)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hairline.tune.searchers import SEARCHERS, Observation, Told, best, propose
from hairline.tune.space import BoolParam, ChoiceParam, FloatParam, IntParam, Space

MIXED = Space(
    (
        IntParam("threads", 1, 16),
        IntParam("batch", 1, 1024, log=True),
        FloatParam("ratio", 0.0, 1.0),
        BoolParam("affinity"),
        ChoiceParam("policy", ("fifo", "lifo", "random")),
    ),
    {"threads": 4, "batch": 16, "ratio": 0.5, "affinity": False, "policy": "fifo"},
)
FINITE = Space(
    (IntParam("threads", 1, 4), BoolParam("affinity")), {"threads": 2, "affinity": False}
)
CONTROL = Observation(0.0, 0.0)


def start(space: Space) -> list[Told]:
    """The history the tuning loop starts every searcher with: the default, the control."""
    return [Told(dict(space.default), CONTROL)]


def told(space: Space, configs: list, value: float = 0.01) -> list[Told]:
    return [Told(c, Observation(value, 0.004)) for c in configs]


@pytest.mark.parametrize("name", [s for s in SEARCHERS if s != "grid"])
def test_every_searcher_proposes_new_distinct_configurations_deterministically(name):
    history = start(MIXED)
    first = propose(name, MIXED, history, 3, seed=7)
    assert first == propose(name, MIXED, history, 3, seed=7)
    history += told(MIXED, first)
    again = propose(name, MIXED, history, 4, seed=7)

    keys = [MIXED.key(c) for c in [MIXED.default, *first, *again]]
    assert len(keys) == len(set(keys)) == 8
    for config in first + again:
        assert set(config) == set(MIXED.names)


@pytest.mark.parametrize("name", SEARCHERS)
def test_pending_and_infeasible_configurations_are_never_proposed(name):
    history = start(FINITE)
    broken = {"threads": 1, "affinity": False}
    history.append(Told(broken, Observation(None, 0.0)))
    pending = [{"threads": 3, "affinity": True}]

    # FINITE has 8 configurations: the default, one infeasible, one pending leave 5.
    proposed = propose(name, FINITE, history, 8, pending=pending, seed=1)

    keys = {FINITE.key(c) for c in proposed}
    assert FINITE.key(broken) not in keys
    assert FINITE.key(pending[0]) not in keys
    assert FINITE.key(FINITE.default) not in keys
    assert len(keys) == len(proposed)
    if name not in ("single", "hill"):
        assert len(proposed) == 5


def test_a_resumed_run_proposes_what_the_uninterrupted_one_would():
    """The same history from a database after a restart: the same proposals."""
    history = start(MIXED) + told(MIXED, propose("random", MIXED, start(MIXED), 4, seed=3))
    rebuilt = [Told(dict(t.config), Observation(t.observation.value, t.observation.se))
               for t in history]  # fmt: skip
    for name in ("bo", "tpe", "hill", "random"):
        assert propose(name, MIXED, history, 2, seed=3) == propose(name, MIXED, rebuilt, 2, seed=3)


def test_grid_walks_every_configuration_in_order_then_stops():
    history = start(FINITE)
    seen = []
    while batch := propose("grid", FINITE, history, 3, seed=0):
        seen += batch
        history += told(FINITE, batch)
    assert [FINITE.key(c) for c in seen] == [
        FINITE.key(c) for c in FINITE.grid() if c != FINITE.default
    ]


def test_grid_refuses_a_space_with_a_float():
    with pytest.raises(ValueError, match="finite space"):
        propose("grid", MIXED, start(MIXED), 1, seed=0)


def test_single_sweeps_each_parameter_alone_then_combines_the_best_values():
    space = Space(
        (IntParam("threads", 1, 5), IntParam("batch", 1, 1024, log=True)),
        {"threads": 3, "batch": 32},
    )
    truth = {("threads", 5): 0.02, ("batch", 181): 0.01}
    history = start(space)
    while batch := propose("single", space, history, 2, seed=0):
        for config in batch:
            moved = [(k, v) for k, v in config.items() if v != space.default[k]]
            if len(moved) == 1:
                value = truth.get(moved[0], -0.01)
            else:
                last = config
                value = 0.03
            history.append(Told(config, Observation(value, 0.002)))
    swept = history[1:-1]
    # threads 1, 2, 4, 5 and batch at 5 points of its log range: 1, 6, 32 (the default),
    # 181, 1024 -> 4 + 4 sweeps, then the combination.
    assert [c.config["threads"] for c in swept[:4]] == [1, 2, 4, 5]
    assert [c.config["batch"] for c in swept[4:]] == [1, 6, 181, 1024]
    assert last == {"threads": 5, "batch": 181}


def test_hill_climbs_a_concave_function_from_the_default_to_its_top_then_restarts():
    space = Space((IntParam("threads", 1, 16),), {"threads": 3})

    def effect(t: int) -> float:
        """Peaks at 9 threads; 0 at the default 3."""
        return 0.002 * ((3 - 9) ** 2 - (t - 9) ** 2)

    history = start(space)
    path = []
    for _ in range(9):
        (config,) = propose("hill", space, history, 1, seed=5)
        path.append(config["threads"])
        history.append(Told(config, Observation(effect(config["threads"]), 0.001)))
    # Down and up from 3, then up one at a time: 2, 4 | 5 | ... | 10 shows 9 is the top.
    assert path[:8] == [2, 4, 5, 6, 7, 8, 9, 10]
    # Stuck at 9 (8 and 10 told, neither better): a restart from an unexplored point.
    assert path[8] not in {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
    assert best(history) == {"threads": 9}


def test_hill_counts_an_improvement_only_beyond_its_standard_error():
    space = Space((IntParam("threads", 1, 16),), {"threads": 3})
    history = [
        *start(space),
        Told({"threads": 2}, Observation(-0.01, 0.004)),
        Told({"threads": 4}, Observation(0.003, 0.004)),  # within 1 se of the default's 0
    ]
    (config,) = propose("hill", space, history, 1, seed=0)
    assert config["threads"] not in (2, 3, 4, 5)  # stuck at 3: restarted, did not climb


def test_a_batch_of_hill_fills_with_restart_points_when_the_climb_is_waiting():
    space = Space((IntParam("threads", 1, 16),), {"threads": 3})
    batch = propose("hill", space, start(space), 4, seed=0)
    assert [c["threads"] for c in batch[:2]] == [2, 4]
    assert len(batch) == 4


def quadratic(config: dict) -> float:
    """A 2-D bowl with its top (+4%) at x = 0.7, y = 0.25 on [0, 1]^2; the default is 0."""

    def raw(x: float, y: float) -> float:
        return 0.04 - 0.08 * (x - 0.7) ** 2 - 0.12 * (y - 0.25) ** 2

    return raw(config["x"], config["y"]) - raw(0.2, 0.8)  # fmt: skip


BOWL = Space((FloatParam("x", 0.0, 1.0), FloatParam("y", 0.0, 1.0)), {"x": 0.2, "y": 0.8})
TOP = quadratic({"x": 0.7, "y": 0.25})


def test_bo_finds_the_top_of_a_noisy_quadratic_within_20_evaluations_on_most_seeds():
    """False failure: none: seeded rngs make every draw the same on every run. Seeds 0 to 7 reach
    0.075 points or better (the comment) against the bound of 0.15, and 3 of the 4 seeds must."""
    found = 0
    for seed in range(4):
        rng = np.random.default_rng(seed)
        history = start(BOWL)
        for _ in range(20):
            (config,) = propose("bo", BOWL, history, 1, seed=seed)
            value = quadratic(config) + rng.normal(0.0, 0.003)
            history.append(Told(config, Observation(value, 0.003)))
        pick = best(history)
        assert pick is not None
        # Within 0.15 percentage points of the top's +5.6% (seeds 0-7 reach 0.075 or better).
        found += TOP - quadratic(pick) < 0.0015
    assert found >= 3


def test_bo_proposes_a_batch_of_distinct_points_believing_the_pending_ones():
    """False failure: none: seeded rngs make every draw the same on every run. The gap bound (1e-3)
    is not recorded for seed 0."""
    rng = np.random.default_rng(0)
    history = start(BOWL)
    for config in propose("bo", BOWL, history, 5, seed=0):
        history.append(Told(config, Observation(quadratic(config) + rng.normal(0, 0.003), 0.003)))
    pending = propose("bo", BOWL, history, 2, seed=0)
    batch = propose("bo", BOWL, history, 3, pending=pending, seed=0)
    points = np.array([BOWL.encode(c) for c in [*pending, *batch]])
    gaps = [math.dist(a, b) for i, a in enumerate(points) for b in points[i + 1 :]]
    assert min(gaps) > 1e-3


def test_unknown_searchers_and_options_are_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="unknown searcher 'ax': use one of bo, hill, single"):
        propose("ax", MIXED, start(MIXED), 1, seed=0)
    with pytest.raises(ValueError, match="unknown option 'pionts' for searcher 'single': "
                       "its options are combine, points"):  # fmt: skip
        propose("single", MIXED, start(MIXED), 1, seed=0, options={"pionts": 3})
    with pytest.raises(ValueError, match="'initial' of searcher 'bo' is a whole number >= 1"):
        propose("bo", MIXED, start(MIXED), 1, seed=0, options={"initial": 0.5})
    with pytest.raises(ValueError, match="its options are none"):
        propose("random", MIXED, start(MIXED), 1, seed=0, options={"x": 1})


def test_bo_starts_with_2d_sobol_points_after_the_default_as_docs_tuning_says():
    """docs/tuning.md: the initial design is 2d+1 points, the default (told first) and 2d
    Sobol points. The design is seeded by the seed alone, so proposals inside it do not
    depend on what was measured; the first after it (the GP's) does."""
    d = len(MIXED.params)
    design = propose("bo", MIXED, start(MIXED), 2 * d, seed=3)
    assert len(design) == 2 * d

    def next_after(k: int, value: float) -> dict:
        history = start(MIXED) + told(MIXED, design[:k], value)
        [config] = propose("bo", MIXED, history, 1, seed=3)
        return config

    # Inside the design: the (k+1)-th Sobol point, whatever the first k measured.
    assert next_after(2 * d - 1, 0.05) == next_after(2 * d - 1, -0.05) == design[2 * d - 1]
    # After 1 + 2d points the GP chooses, from the values.
    assert next_after(2 * d, 0.05) != next_after(2 * d, -0.05)
