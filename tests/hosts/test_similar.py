"""Choosing nearly identical hosts (pure): one class per experiment, the region with most
quota left, turbo off, the class with most free hosts, high-CoV hardware avoided, and
hardware mode's arms as host classes."""

from __future__ import annotations

import itertools
import random

import pytest

from hairline.hosts.similar import (
    CLASS_FACTS,
    Choice,
    Group,
    NoChoice,
    Requirements,
    assign_slots,
    choose,
    mismatches,
    shared_facts,
)


def group(free: int = 4, **facts: str) -> Group:
    base = {
        "region": "eu",
        "server_type": "web",
        "cpu_arch": "x86_64",
        "kernel": "6.1",
        "cpu_model": "Xeon 8375C",
        "turbo": "off",
    }
    return Group(**{**base, **facts}, free=free)


ROOM = {"eu": 100, "us": 100, "ap": 100}


def picked(choice: Choice | NoChoice) -> Choice:
    assert isinstance(choice, Choice), choice
    return choice


def test_all_hosts_come_from_one_class_even_when_no_class_alone_is_largest() -> None:
    groups = [group(1, kernel="6.1"), group(1, kernel="6.8"), group(1, kernel="5.15")]
    got = choose(groups, [{}, {}], room=ROOM)
    assert isinstance(got, NoChoice)
    assert "no class (region, server type, CPU arch, kernel) has 2 free hosts" in got.reason


def test_the_class_with_the_most_free_hosts_is_chosen() -> None:
    small, large = group(2, kernel="6.1"), group(9, kernel="6.8")
    got = picked(choose([small, large], [{}, {}], room=ROOM))
    assert got.slots == (large, large)


def test_turbo_off_goes_before_a_larger_class_with_turbo_on() -> None:
    on, off = group(9, kernel="6.8", turbo="on"), group(2, kernel="6.1", turbo="off")
    assert picked(choose([on, off], [{}, {}], room=ROOM)).slots == (off, off)


def test_within_a_class_one_cpu_model_and_turbo_state_is_kept_when_one_group_holds_all() -> None:
    # Same class (kernel 6.1): one host with turbo off, five with turbo unknown.
    lone = group(1, cpu_model="EPYC 7R13", turbo="off")
    many = group(5, cpu_model="Xeon 8375C", turbo="unknown")
    assert picked(choose([lone, many], [{}, {}], room=ROOM)).slots == (many, many)


def test_the_region_with_the_most_quota_left_wins_over_more_free_hosts() -> None:
    eu, us = group(10, region="eu"), group(3, region="us")
    got = picked(choose([eu, us], [{}, {}], room={"eu": 2, "us": 5}))
    assert got.region == "us"
    # ...and a region without room for the whole experiment is never used.
    got = picked(choose([eu, us], [{}, {}], room={"eu": 2, "us": 1}))
    assert got.region == "eu"
    short = choose([eu, us], [{}, {}], room={"eu": 1, "us": 1})
    assert isinstance(short, NoChoice) and "room for fewer than 2 hosts" in short.reason


def test_the_next_region_is_used_when_the_best_one_has_no_matching_class() -> None:
    eu_split = [group(1, region="eu", kernel="6.1"), group(1, region="eu", kernel="6.8")]
    us = group(2, region="us")
    got = picked(choose([*eu_split, us], [{}, {}], room={"eu": 10, "us": 2}))
    assert got.region == "us"


def test_cpu_models_and_kernels_with_high_cov_are_avoided() -> None:
    noisy_cpu = group(9, cpu_model="Xeon E5-2680 v4")
    noisy_kernel = group(9, cpu_model="EPYC 7D13", kernel="5.6.13")
    quiet = group(2, cpu_model="EPYC 7D13", kernel="5.2.0")
    cov = {
        ("cpu_model", "Xeon E5-2680 v4"): 0.42,
        ("cpu_model", "EPYC 7D13"): 0.056,
        ("kernel", "5.6.13"): 0.52,
        ("kernel", "5.2.0"): 0.095,
    }
    wants = Requirements(max_cov=0.10, cov=cov)
    got = picked(choose([noisy_cpu, noisy_kernel, quiet], [{}, {}], room=ROOM, requirements=wants))
    assert got.slots == (quiet, quiet)
    none = choose([noisy_cpu], [{}], room=ROOM, requirements=wants)
    assert isinstance(none, NoChoice)
    assert "'Xeon E5-2680 v4' varied by 42.0% (CoV)" in none.reason
    assert "max_cov 10.0%" in none.reason
    # Without a threshold, or without history for a model, nothing is avoided.
    assert isinstance(choose([noisy_cpu], [{}], room=ROOM, requirements=Requirements(cov=cov)),
                      Choice)  # fmt: skip


def test_pinned_facts_keep_an_experiment_in_its_region_and_class() -> None:
    eu, us = group(2, region="eu"), group(9, region="us")
    got = picked(choose([eu, us], [{}], room=ROOM, pinned={"region": "eu"}))
    assert got.slots == (eu,)
    gone = choose([us], [{}], room=ROOM, pinned={"region": "eu", "kernel": "6.1"})
    assert isinstance(gone, NoChoice) and "matching region eu, kernel 6.1" in gone.reason


def test_hardware_mode_gives_each_arm_its_class_matching_on_everything_else() -> None:
    a_61 = group(3, cpu_model="Xeon 8375C", kernel="6.1")
    b_61 = group(1, cpu_model="EPYC 7R13", kernel="6.1")
    a_68 = group(5, cpu_model="Xeon 8375C", kernel="6.8", turbo="on")
    b_68 = group(5, cpu_model="EPYC 7R13", kernel="6.8", turbo="on")
    b_68_off = group(5, cpu_model="EPYC 7R13", kernel="6.8", turbo="off")
    arms = ({"cpu_model": "Xeon 8375C"}, {"cpu_model": "EPYC 7R13"})
    wants = Requirements(arms=arms)
    got = picked(choose([a_61, b_61, a_68, b_68, b_68_off], arms, room=ROOM, requirements=wants))
    # Both turbo off (the kernel 6.8 pair would mix turbo or run with it on).
    assert got.slots == (a_61, b_61)
    assert shared_facts(arms) == ("region", "server_type", "cpu_arch", "kernel", "turbo")
    missing = choose([a_61, a_68], arms, room=ROOM, requirements=wants)
    assert isinstance(missing, NoChoice) and "one for every arm" in missing.reason


def test_a_high_cov_model_an_arm_names_is_still_given_to_it() -> None:
    arms = ({"cpu_model": "Xeon E5-2680 v4"}, {"cpu_model": "EPYC 7D13"})
    wants = Requirements(arms=arms, max_cov=0.1, cov={("cpu_model", "Xeon E5-2680 v4"): 0.42})
    groups = [group(1, cpu_model="Xeon E5-2680 v4"), group(1, cpu_model="EPYC 7D13")]
    assert isinstance(choose(groups, arms, room=ROOM, requirements=wants), Choice)


def test_a_chosen_class_never_mixes_class_facts_on_random_inventories() -> None:
    """False failure: none: a seeded rng draws the same inputs on every run, and the property holds
    for every input."""
    rng = random.Random(7)
    values = {"region": ["eu", "us"], "server_type": ["web", "db"], "cpu_arch": ["x86_64"],
              "kernel": ["5.15", "6.1", "6.8"], "cpu_model": ["A", "B", "C"],
              "turbo": ["on", "off", "unknown"]}  # fmt: skip
    combos = [dict(zip(values, c, strict=True)) for c in itertools.product(*values.values())]
    for _ in range(300):
        groups = [group(rng.randint(0, 3), **c) for c in rng.sample(combos, rng.randint(1, 20))]
        need = rng.randint(1, 5)
        got = choose(groups, [{}] * need, room={"eu": rng.randint(0, 6), "us": rng.randint(0, 6)})
        if isinstance(got, Choice):
            assert len({tuple(g.fact(f) for f in CLASS_FACTS) for g in got.slots}) == 1
            assert all(got.slots.count(g) <= g.free for g in got.slots)
            assert {g.region for g in got.slots} == {got.region}


def test_kept_hosts_go_back_to_the_arms_whose_class_they_are() -> None:
    arms = ({"cpu_model": "A"}, {"cpu_model": "B"})
    assert assign_slots([{"cpu_model": "B"}, {"cpu_model": "A"}], arms) == [1, 0]
    assert assign_slots([{"cpu_model": "B"}], arms) == [None, 0]
    assert assign_slots([{"cpu_model": "A"}, {"cpu_model": "A"}], ({}, {})) == [0, 1]


def test_mismatches_name_each_fact_that_differs_and_leave_out_the_compared_hardware() -> None:
    hosts = [
        {"region": "eu", "kernel": "6.1", "cpu_model": "A", "turbo": "off"},
        {"region": "eu", "kernel": "6.8", "cpu_model": "B", "turbo": "off"},
    ]
    assert mismatches(hosts) == {"kernel": ("6.1", "6.8"), "cpu_model": ("A", "B")}
    assert mismatches(hosts, expected=("cpu_model",)) == {"kernel": ("6.1", "6.8")}
    assert mismatches(hosts[:1]) == {}


def test_arm_facts_outside_the_matchable_ones_are_a_programming_error() -> None:
    with pytest.raises(ValueError, match="region"):
        Requirements(arms=({"region": "eu"},))


def test_arms_that_name_every_fact_share_only_the_region() -> None:
    a = {"server_type": "web", "cpu_arch": "x86_64", "cpu_model": "A", "kernel": "6.1",
         "turbo": "off"}  # fmt: skip
    b = {**a, "cpu_model": "B", "kernel": "6.8"}
    groups = [group(1, **a), group(1, **b), group(1, **{**b, "region": "us"})]
    got = picked(choose(groups, [a, b], room=ROOM, requirements=Requirements(arms=(a, b))))
    assert [g.cpu_model for g in got.slots] == ["A", "B"] and got.region == "eu"
