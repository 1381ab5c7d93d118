"""bench/tune/run.py end to end on two seeds of the cheap searchers: the table and the JSON
it records in bench/RESULTS.md come out, with every searcher, objective and checkpoint; and
Bayesian optimisation against the exhaustive sweep on the sample service's knobs."""

from __future__ import annotations

import json
import subprocess
import sys

from benchscript import BENCH, load_bench

SCRIPT = BENCH / "tune" / "run.py"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--seeds", "2", "--searchers", "hill,random", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_the_json_has_a_regret_per_objective_searcher_and_checkpoint():
    """False failure: none: the bench's simulated objectives and noise are seeded, the same on every
    run; the 120 s timeout is for two seeds of the cheap searchers (100 seeds took under 8 s an
    objective, bench/RESULTS.md)."""
    result = json.loads(run("--json").stdout)
    assert result["picked_as"] == "best observed, judged by its true value"
    assert set(result["objectives"]) == {"threads", "buffer", "mixed4", "service", "rough"}
    for name, table in result["objectives"].items():
        # The simulated effects peak 2-2.2% above the default; the sample service's knobs
        # 23% (its model) and 32% (its measured table) below the default's CPU.
        top = {"service": 23.18, "rough": 31.58}.get(name, 2.1)
        assert abs(table["top_pp"] - top) <= 0.15
        for searcher in ("hill", "random"):
            cells = table["searchers"][searcher]
            for k in ("5", "10", "20"):
                # The optimum's true value minus the pick's: never below 0, and above the top
                # only when noise made a worse configuration than the default look better.
                assert 0.0 <= cells[k]["q1_pp"] <= cells[k]["median_pp"] <= cells[k]["q3_pp"]
                assert cells[k]["median_pp"] < table["top_pp"] + 1.0
    for name in ("service", "rough"):
        for gaps in result["versus_sweep"][name].values():
            assert gaps["median_pct"] <= gaps["p90_pct"] <= gaps["max_pct"]
            assert 0 <= gaps["within_goal"] <= 2


def test_the_table_marks_the_lowest_median_and_says_how_bo_picks(tmp_path):
    out = tmp_path / "tune.json"
    table = run("--objectives", "threads", "--out", str(out)).stdout
    assert "| threads (+2.20%) | hill |" in table
    assert "**" in table
    assert "every searcher's pick is its best observed value, judged by its true value" in table
    assert json.loads(out.read_text())["seeds"] == 2


# BO's budget against the sweep's 23 evaluations: at 15, its pick was within 2% of the
# sweep's on 98 and 99 of the bench's 100 seeds (bench/RESULTS.md, "Autotuning searchers").
BO_BUDGET = 15


def test_bo_picks_within_2_percent_of_the_sweep_with_two_thirds_of_its_evaluations():
    """The sample service's knobs (the bench's ``service`` objective: the engine's
    steady-state CPU per request over tune.toml's 24 configurations; and ``rough``: the
    measured table of docs/engine.md as the truth), each evaluation told with noise like a
    real A/B's: the exhaustive sweep tries all 23 others, BO 15; both pick their best
    observed value and are judged by the true CPU of what they picked.

    False failure: none: the objectives and their noise are seeded, so every run draws the
    same. The seeds are the first ones (four and two, to keep it to a few seconds), not
    chosen: the bench found BO within 2% on 98 and 99 of its 100 seeds at this budget.
    Random sampling with the same budget is within 2% on 90 and 70 of them, so a searcher
    no better than chance passes these six cases with probability about 0.9^4 x 0.7^2 =
    0.32; the default or any fixed pick fails.
    """
    bench = load_bench("tune/run.py")
    found = {o.name: o for o in bench.objectives()}
    cases = [("service", seed) for seed in range(4)] + [("rough", seed) for seed in range(2)]
    gaps = [bench.gap_to_sweep(found[name], "bo", seed, BO_BUDGET) for name, seed in cases]
    assert max(gaps) <= 0.02
