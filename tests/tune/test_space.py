"""The space's helpers for the searchers: one step in one parameter, uniform draws."""

from __future__ import annotations

import math

import numpy as np

from hairline.tune.space import (
    BoolParam,
    ChoiceParam,
    FloatParam,
    IntParam,
    Space,
    neighbours,
    sample,
)

SPACE = Space(
    (
        IntParam("threads", 1, 16),
        IntParam("batch", 1, 1024, log=True),
        FloatParam("ratio", 0.0, 1.0),
        BoolParam("affinity"),
        ChoiceParam("policy", ("fifo", "lifo", "random")),
    ),
    {"threads": 4, "batch": 16, "ratio": 0.5, "affinity": False, "policy": "lifo"},
)


def moved(config: dict, start: dict = SPACE.default) -> list[tuple[str, object]]:
    return [(k, v) for k, v in config.items() if v != start[k]]


def test_neighbours_move_one_parameter_one_step_down_then_up():
    steps = [moved(c) for c in neighbours(SPACE, SPACE.default)]
    assert steps == [
        [("threads", 3)],
        [("threads", 5)],
        [("batch", 8)],  # log-scaled: by a factor of 2
        [("batch", 32)],
        [("ratio", 0.4)],  # a tenth of the range
        [("ratio", 0.6)],
        [("affinity", True)],
        [("policy", "fifo")],
        [("policy", "random")],
    ]


def test_neighbours_stay_in_range_and_a_step_that_changes_nothing_is_left_out():
    corner = {**SPACE.default, "threads": 16, "batch": 1, "ratio": 0.95, "policy": "random"}
    steps = [moved(c, corner) for c in neighbours(SPACE, corner)]
    values = {(k, v) for step in steps for k, v in step}
    assert ("threads", 15) in values and ("batch", 2) in values
    assert ("ratio", 1.0) in values  # clipped to the end of the range
    assert [k for k, _ in values].count("batch") == 1  # 1 cannot halve
    assert len(neighbours(SPACE, corner)) == len({SPACE.key(c) for c in neighbours(SPACE, corner)})


def test_a_float_stepped_up_and_back_down_is_the_same_configuration():
    up = neighbours(SPACE, SPACE.default)[5]
    back = [c for c in neighbours(SPACE, up) if c["ratio"] < up["ratio"]]
    assert SPACE.key(back[0]) == SPACE.key(SPACE.default)


def test_sample_is_uniform_on_each_parameter_and_log_uniform_on_log_ones():
    """False failure: none: seeded rngs make every draw the same on every run. Over 4,000 draws the
    median's sd is near 0.05 (in log2), so 0.4 is about 8 sd; the mean of a fair coin's sd is 0.008,
    so 0.05 is about 6 sd."""
    rng = np.random.default_rng(0)
    draws = [sample(SPACE, rng) for _ in range(4000)]
    batches = np.array([math.log2(d["batch"]) for d in draws])
    # Uniform in log2 from 0 to 10: the median near 5 (batch 32), not near 512.
    assert 4.6 < np.median(batches) < 5.4
    assert {d["policy"] for d in draws} == {"fifo", "lifo", "random"}
    assert 0.45 < np.mean([d["affinity"] for d in draws]) < 0.55
    assert {d["threads"] for d in draws} == set(range(1, 17))
    assert all(0.0 <= d["ratio"] <= 1.0 for d in draws)
