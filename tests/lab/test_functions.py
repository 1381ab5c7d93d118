"""The function analysis against known truth: simulated profiles of two arms, seeded.

Each simulated batch draws a profile of ``SAMPLES`` samples from the functions' true shares
(multinomial: the sampling noise perf has) and scales it by the arm's CPU per request with
a per-batch noise of 1.5% (the lab's A/A spread on this VM), as lab/sampling.py does.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hairline.config.profiling import ProfileConfig
from hairline.lab.functions import analyze_functions, neighbours_of
from hairline.lab.sampling import SAMPLES_METRIC
from hairline.profile.functions import OTHER, SELF, TOTAL, function_metric
from hairline.store.observations import observations_from_table

# A service of 100,000 ns per request: rank 55%, load 20%, render 13% (its child escape 1%
# more), parse 6%, auth 4%, log 1.5%, and 40 tiny functions sharing the last 0.5%.
BASE = {
    "rank": 0.545,
    "load": 0.20,
    "render": 0.13,
    "escape": 0.01,
    "parse": 0.06,
    "auth": 0.04,
    "log": 0.01,
    **{f"tiny{i}": 0.0125 / 40 for i in range(40)},
}
CPU_NS = 100_000.0
SAMPLES = 20_000
CHILDREN = {"render": ("escape",)}


def simulate(
    rng: np.random.Generator,
    *,
    trials: int = 10,
    candidate: dict[str, float] | None = None,
) -> pa.Table:
    """Observations of an A/B (or an A/A without ``candidate``): per trial two batches,
    the arms swapping hosts, each function's self and render's inclusive cost."""
    names = [*BASE, *(n for n in candidate or {} if n not in BASE)]
    rows: dict[str, list[object]] = {k: [] for k in ("trial", "batch", "arm", "host", "metric",
                                                      "value")}  # fmt: skip

    def add(trial: int, batch: int, arm: str, host: int, metric: str, value: float) -> None:
        for key, v in zip(rows, (trial, batch, arm, host, metric, value), strict=True):
            rows[key].append(v)

    for trial in range(trials):
        for batch in range(2):
            for arm in ("A", "B"):
                weights = dict(BASE)
                if arm == "B" and candidate:
                    weights.update(candidate)
                w = np.array([weights.get(n, 0.0) for n in names])
                cpu = CPU_NS * w.sum() * (1 + rng.normal(0, 0.015))
                counts = rng.multinomial(SAMPLES, w / w.sum())
                host = (batch + (arm == "B")) % 2
                add(trial, batch, arm, host, "cpu_ns_per_request", cpu)
                add(trial, batch, arm, host, SAMPLES_METRIC, float(SAMPLES))
                share = dict(zip(names, counts / SAMPLES, strict=True))
                for name, s in share.items():
                    if s > 0:
                        add(trial, batch, arm, host, function_metric(SELF, name), s * cpu)
                total = share["render"] + share["escape"]
                add(trial, batch, arm, host, function_metric(TOTAL, "render"), total * cpu)
    return pa.table(rows)


def analyse(table: pa.Table, **config: float):  # type: ignore[no-untyped-def]
    observations = observations_from_table(table, source="simulated")
    [result] = analyze_functions(
        observations, {"B": "A"}, ProfileConfig(**config), neighbours={
            "render": frozenset({"escape", "main"}), "escape": frozenset({"render"}),
            "rank": frozenset({"main"}), "load": frozenset({"main"}),
        },
    )  # fmt: skip
    return result


def test_a_slower_one_percent_function_is_found_and_siblings_stay_within_the_fdr() -> None:
    """30 seeded A/Bs of 10 trials, escape (1% of the service) 20% slower: +0.2% of the
    service. escape's per-batch cost has a sampling sd of about 7% (200 samples of 20,000)
    and the 1.5% CPU noise; the paired t over ten trials puts +20% at about 9 standard
    errors: it was found in 100 of 100 such simulations (seed 100, 2026-11-28), so 28 of
    30 is far inside. A sibling (another function's self cost) was flagged in 7 of those
    100 (BH at 5% over nine tests with one true change); 6 of 30 is the binomial bound at
    about 3e-3. render's inclusive cost (+1.6% of a 14% function, under the batch's own
    1.5% CPU noise) was flagged in 13 of 100: an ancestor this close to the service's
    noise needs more trials, and that is bench/profiling's figure, not asserted here.
    Seeded: the outcome is fixed for this code."""
    rng = np.random.default_rng(2026)
    found = siblings = 0
    for _ in range(30):
        result = analyse(simulate(rng, candidate={"escape": 0.012}))
        flagged = {(c.function, c.kind) for c in result.flagged}
        found += ("escape", SELF) in flagged
        siblings += any(k == SELF and f != "escape" for f, k in flagged)
        escape = next(c for c in result.changes if (c.function, c.kind) == ("escape", SELF))
        assert escape.share == pytest.approx(0.01, rel=0.1)
    assert found >= 28, found
    assert siblings <= 6, siblings


def test_aa_runs_flag_functions_within_what_the_fdr_allows() -> None:
    """100 seeded A/A experiments of 10 trials. BH at 5% bounds the chance of any false
    finding in an experiment where every null is true by 5%: 5 of 100 expected (5 were,
    seed 100); the binomial band at 1e-4 on the upper side is 15. Seeded."""
    rng = np.random.default_rng(11)
    flagged_experiments = 0
    for _ in range(100):
        result = analyse(simulate(rng))
        flagged_experiments += bool(result.flagged)
    assert flagged_experiments <= 15, flagged_experiments


def test_a_function_moved_into_its_caller_is_a_shift_not_a_regression() -> None:
    """Inlining: escape's cost now shows as render's self cost. Seeded."""
    rng = np.random.default_rng(3)
    result = analyse(simulate(rng, candidate={"escape": 0.0, "render": 0.14}))
    by = {(c.function, c.kind): c for c in result.changes}
    assert by[("escape", SELF)].verdict in ("gone", "shift")
    assert by[("render", SELF)].verdict == "shift", by[("render", SELF)]
    assert "escape" in by[("render", SELF)].shift_with
    assert not [c for c in result.flagged if c.verdict == "regression"]


def test_a_new_function_is_reported_with_its_cost_untested() -> None:
    rng = np.random.default_rng(5)
    result = analyse(simulate(rng, candidate={"compress": 0.02}))
    [new] = [c for c in result.changes if c.function == "compress"]
    assert new.verdict == "new" and new.share == pytest.approx(0.02 / 1.02, rel=0.1)
    assert np.isnan(new.p_value)


def test_tiny_functions_are_pooled_and_the_pool_tested() -> None:
    rng = np.random.default_rng(9)
    result = analyse(simulate(rng), min_share=0.005)
    assert result.pooled == 40
    assert [c.function for c in result.changes if c.function == OTHER] == [OTHER]
    assert not {c.function for c in result.changes} & {f"tiny{i}" for i in range(40)}


def test_fewer_than_two_profiled_trials_give_no_analysis() -> None:
    rng = np.random.default_rng(1)
    observations = observations_from_table(simulate(rng, trials=1), source="one trial")
    assert analyze_functions(observations, {"B": "A"}, ProfileConfig()) == []


def test_neighbours_come_from_the_folded_stacks(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "a.folded").write_text("main;render;escape 10\nmain;rank 30\n")
    (tmp_path / "b.folded").write_text("main;render 5\n")
    neighbours = neighbours_of([tmp_path / "a.folded", tmp_path / "b.folded", tmp_path / "x"])
    assert neighbours["render"] == {"main", "escape"}
    assert neighbours["rank"] == {"main"}


def test_a_missing_inclusive_row_is_the_self_cost_not_zero() -> None:
    """A batch writes rank's inclusive row only where rank called something; elsewhere its
    inclusive cost is its self cost."""
    rows = {k: [] for k in ("trial", "batch", "arm", "host", "metric", "value")}
    for trial in range(4):
        for batch in range(2):
            for arm in ("A", "B"):
                for metric, value in (
                    ("cpu_ns_per_request", 1000.0),
                    (SAMPLES_METRIC, 1000.0),
                    (function_metric(SELF, "rank"), 500.0 + trial),
                    (function_metric(SELF, "load"), 500.0 - trial),
                ):
                    for key, v in zip(rows, (trial, batch, arm, batch, metric, value), strict=True):
                        rows[key].append(v)
                if arm == "A" and batch == 0:  # one batch where rank had a callee
                    row = (trial, batch, arm, batch, function_metric(TOTAL, "rank"), 510.0)
                    for key, v in zip(rows, row, strict=True):
                        rows[key].append(v)
    result = analyse(pa.table(rows))
    [total] = [c for c in result.changes if (c.function, c.kind) == ("rank", TOTAL)]
    # A: 510 in batch 0, 500 + trial (its self cost) in batch 1; B: 500 + trial. Read as 0
    # where missing, A's mean would be about 255 and the effect +250.
    assert total.mean_a_ns == pytest.approx(506.5 - 0.75, abs=0.01)
    assert total.effect_ns == pytest.approx(-4.25, abs=0.01)
