"""Choosing the hosts nearest the population and splitting them (HHVM section 5.1), on
synthetic hosts with known outliers."""

from __future__ import annotations

import numpy as np

from hairline.hosts.runs import RunValue
from hairline.tune.closeness import (
    AA_LEVEL,
    AA_SPREAD,
    LABEL_DISTANCE,
    Candidate,
    aa_behaviour,
    distances,
    nearest,
    split,
)


def population(seed: int = 1) -> list[Candidate]:
    """Twelve alike hosts (A/A level within 1% of average, CoV ~1%), and three outliers:
    one slow (level 1.08), one noisy (CoV 6%), one of another CPU model."""
    rng = np.random.default_rng(seed)
    hosts = [
        Candidate(
            f"h{i:02d}",
            numbers={
                AA_LEVEL: 1 + rng.normal(0, 0.004),
                AA_SPREAD: 0.01 + rng.normal(0, 0.001),
                "cores": 16.0,
            },
            labels={"cpu_model": "Xeon", "turbo": "off"},
        )
        for i in range(12)
    ]
    hosts.append(Candidate("slow", numbers={AA_LEVEL: 1.08, AA_SPREAD: 0.01, "cores": 16.0},
                           labels={"cpu_model": "Xeon", "turbo": "off"}))  # fmt: skip
    hosts.append(Candidate("noisy", numbers={AA_LEVEL: 1.0, AA_SPREAD: 0.06, "cores": 16.0},
                           labels={"cpu_model": "Xeon", "turbo": "off"}))  # fmt: skip
    hosts.append(Candidate("epyc", numbers={AA_LEVEL: 1.0, AA_SPREAD: 0.01, "cores": 16.0},
                           labels={"cpu_model": "EPYC", "turbo": "off"}))  # fmt: skip
    return hosts


def test_the_nearest_hosts_leave_the_outliers_out() -> None:
    distance = distances(population())
    chosen = nearest(distance, 8)
    assert len(chosen) == 8 and not {"slow", "noisy", "epyc"} & set(chosen)
    # The three outliers are the three furthest hosts, whichever feature made them so.
    assert set(nearest(distance, 15)[-3:]) == {"slow", "noisy", "epyc"}
    assert distance["epyc"] == LABEL_DISTANCE
    assert distance["slow"] > 3 and distance["noisy"] > 3


def test_a_host_without_a_number_takes_the_population_value() -> None:
    hosts = [*population(), Candidate("new", numbers={AA_LEVEL: None, AA_SPREAD: None},
                                      labels={"cpu_model": "Xeon", "turbo": "off"})]  # fmt: skip
    # "cores" unknown too: nothing makes it differ.
    assert distances(hosts)["new"] == 0.0


def test_the_split_is_seeded_disjoint_and_independent_of_input_order() -> None:
    names = [f"h{i}" for i in range(8)]
    test, control = split(names, 4, seed=7)
    assert len(test) == len(control) == 4 and set(test) | set(control) == set(names)
    assert split(list(reversed(names)), 4, seed=7) == (test, control)
    # Another seed gives another split (over seeds, every host lands on either side).
    sides = {split(names, 4, seed=s)[0] for s in range(20)}
    assert len(sides) > 5
    assert {h for t in sides for h in t} == set(names)


def test_aa_behaviour_is_each_hosts_level_and_spread_over_its_experiments() -> None:
    runs = []
    for experiment in range(4):
        for trial in range(3):
            for arm, host, value in (("A", "fast", 95.0), ("B", "slow", 105.0)):
                runs.append(RunValue(experiment, "aa", "svc", trial, 0, arm, host,
                                     value + trial, {}))  # fmt: skip
    behaviour = aa_behaviour(runs, min_runs=3)
    assert set(behaviour) == {"fast", "slow"}
    assert behaviour["fast"][AA_LEVEL] < 1 < behaviour["slow"][AA_LEVEL]
    assert 0 < behaviour["fast"][AA_SPREAD] < 0.02
    assert aa_behaviour(runs, min_runs=100) == {}
