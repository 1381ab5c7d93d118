"""Factorial designs: treatments, fractions and their aliasing, the runs' random order."""

from __future__ import annotations

from collections import Counter

import pytest

from hairline.attribute.design import (
    aliases,
    fractional_factorial,
    full_factorial,
    parse_generator,
    resolution,
    run_groups,
)

THREE = {"cpu": ["0", "0.3"], "stall": ["off", "on"], "threads": ["1", "2"]}


def test_a_full_factorial_has_every_combination_once() -> None:
    treatments = full_factorial({"a": ["1", "2", "3"], "b": ["x", "y"]})
    assert len(treatments) == 6
    assert len({tuple(t.items()) for t in treatments}) == 6
    assert treatments[0] == {"a": "1", "b": "x"} and treatments[1] == {"a": "1", "b": "y"}


def test_a_half_fraction_sets_the_generated_factor_by_the_product() -> None:
    treatments = fractional_factorial(THREE, [parse_generator("threads = cpu*stall")])
    assert len(treatments) == 4
    sign = {"0": -1, "0.3": 1, "off": -1, "on": 1, "1": -1, "2": 1}
    for t in treatments:
        assert sign[t["threads"]] == sign[t["cpu"]] * sign[t["stall"]]
    negative = fractional_factorial(THREE, [parse_generator("threads = -cpu*stall")])
    assert all(sign[t["threads"]] == -sign[t["cpu"]] * sign[t["stall"]] for t in negative)


def test_a_resolution_iii_fraction_aliases_main_effects_with_interactions() -> None:
    generators = [parse_generator("threads = cpu*stall")]
    assert resolution(generators) == 3
    assert ("cpu", "stall:threads") in aliases(generators, list(THREE), 2)
    assert aliases(generators, list(THREE), 1) == []
    assert resolution([]) is None


def test_a_resolution_iv_fraction_keeps_main_effects_clear_of_two_factor_interactions() -> None:
    four = {**THREE, "cache": ["off", "on"]}
    generators = [parse_generator("cache = cpu*stall*threads")]
    assert resolution(generators) == 4
    found = aliases(generators, list(four), 2)
    assert found and all(":" in a and ":" in b for a, b in found)  # 2fi with 2fi only


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("c", "not a generator"),
        ("c = a", "product of two or more"),
        ("c = a*c", "not on both sides"),
    ],
)
def test_bad_generators_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_generator(text)


def test_a_fraction_needs_two_level_factors_and_known_names() -> None:
    with pytest.raises(ValueError, match="two-level"):
        fractional_factorial(
            {**THREE, "cpu": ["0", "1", "2"]}, [parse_generator("threads = cpu*stall")]
        )
    with pytest.raises(ValueError, match="not among the factors"):
        fractional_factorial(THREE, [parse_generator("threads = cpu*nope")])


def test_runs_are_grouped_without_repeating_a_treatment_and_in_a_seeded_order() -> None:
    treatments = full_factorial({"cpu": ["0", "1"], "stall": ["off", "on"]})
    groups = run_groups(treatments, 3, group_size=2, seed=7)
    runs = [r for g in groups for r in g]
    assert sorted(r.index for r in runs) == list(range(12))
    assert Counter(r.treatment for r in runs) == {0: 3, 1: 3, 2: 3, 3: 3}
    assert all(len(g) == 2 and g[0].treatment != g[1].treatment for g in groups)
    assert groups == run_groups(treatments, 3, group_size=2, seed=7)
    assert groups != run_groups(treatments, 3, group_size=2, seed=8)


def test_load_factors_keep_their_runs_in_experiments_of_their_own() -> None:
    treatments = full_factorial({"rate": ["300", "600"], "cpu": ["0", "1"]})
    groups = run_groups(treatments, 2, group_size=2, together=["rate"], seed=1)
    for group in groups:
        assert len({treatments[r.treatment]["rate"] for r in group}) == 1


def test_a_run_left_alone_gets_company() -> None:
    # Three treatments in pairs: one run per repetition is left over.
    groups = run_groups(full_factorial({"a": ["1", "2", "3"]}), 3, group_size=2, seed=1)
    assert all(len(g) >= 2 for g in groups)
    assert all(len({r.treatment for r in g}) == len(g) for g in groups)
    assert len({r.index for g in groups for r in g}) == sum(len(g) for g in groups)
    with pytest.raises(ValueError, match="only one at its load level"):
        run_groups(full_factorial({"rate": ["1", "2"]}), 2, group_size=2,
                   together=["rate"], seed=1)  # fmt: skip
